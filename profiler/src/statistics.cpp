#include <ka/core/error.hpp>
#include <ka/profiler/statistics.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ka::profiler {

double student_t95(std::size_t dof) {
  // Exact table to 30 degrees of freedom, then the normal approximation with a 1/dof term.
  static constexpr double kTable[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306,
                                      2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
                                      2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
                                      2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
  KA_CHECK(dof >= 1, "student_t95: need at least one degree of freedom");
  if (dof <= 30) return kTable[dof - 1];
  return 1.95996 + 2.4 / static_cast<double>(dof);
}

Summary summarize(std::vector<double> samples) {
  KA_CHECK(!samples.empty(), "summarize: no samples");
  Summary s;
  s.count = samples.size();
  std::sort(samples.begin(), samples.end());
  s.min = samples.front();
  s.max = samples.back();
  const std::size_t mid = samples.size() / 2;
  s.median = samples.size() % 2 == 1 ? samples[mid] : 0.5 * (samples[mid - 1] + samples[mid]);
  s.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(s.count);
  if (s.count >= 2) {
    double sq = 0.0;
    for (const double v : samples) sq += (v - s.mean) * (v - s.mean);
    s.stddev = std::sqrt(sq / static_cast<double>(s.count - 1));
    s.ci95_half_width =
        student_t95(s.count - 1) * s.stddev / std::sqrt(static_cast<double>(s.count));
  }
  return s;
}

}  // namespace ka::profiler
