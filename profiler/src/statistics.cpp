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

double quantile_sorted(const std::vector<double>& sorted, double q) {
  KA_CHECK(!sorted.empty(), "quantile_sorted: no samples");
  KA_CHECK(q >= 0.0 && q <= 1.0, "quantile_sorted: q must lie in [0, 1], got ", q);
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] + frac * (sorted[hi] - sorted[lo]);
}

MedianInterval median_ci95(const std::vector<double>& sorted) {
  KA_CHECK(!sorted.empty(), "median_ci95: no samples");
  const std::size_t n = sorted.size();
  // B, the number of samples below the true median, is Binomial(n, 1/2); the interval
  // [x_(l), x_(n+1-l)] covers the median with probability 1 - 2 P(B <= l - 1). Find the largest
  // l whose tail stays within 2.5%, summing the pmf in log space so large n cannot underflow.
  const double log_half_n = -static_cast<double>(n) * std::log(2.0);
  const double log_n_fact = std::lgamma(static_cast<double>(n) + 1.0);
  double tail = 0.0;  // P(B <= l - 1)
  std::size_t l = 0;
  while (l < n / 2) {
    const auto i = static_cast<double>(l);
    const double pmf = std::exp(log_n_fact - std::lgamma(i + 1.0) -
                                std::lgamma(static_cast<double>(n) - i + 1.0) + log_half_n);
    if (tail + pmf > 0.025) break;
    tail += pmf;
    ++l;
  }
  MedianInterval out;
  if (l == 0) {
    out.low = -INFINITY;
    out.high = INFINITY;
    return out;
  }
  out.low = sorted[l - 1];
  out.high = sorted[n - l];
  return out;
}

Outliers tukey_outliers(std::vector<double> samples, double k) {
  Outliers out;
  // Quartiles of three samples or fewer say nothing about the tails.
  if (samples.size() < 4) return out;
  std::sort(samples.begin(), samples.end());
  const double q1 = quantile_sorted(samples, 0.25);
  const double q3 = quantile_sorted(samples, 0.75);
  out.lower_fence = q1 - k * (q3 - q1);
  out.upper_fence = q3 + k * (q3 - q1);
  for (const double v : samples) {
    if (v < out.lower_fence) ++out.low;
    if (v > out.upper_fence) ++out.high;
  }
  return out;
}

}  // namespace ka::profiler
