// Summary statistics of repeated measurements.
#pragma once

#include <cstddef>
#include <vector>

namespace ka::profiler {

/// Summary of a sample of measurements (e.g. per-call times in ns).
struct Summary {
  std::size_t count = 0;
  double min = 0.0;
  double max = 0.0;
  double mean = 0.0;
  double median = 0.0;
  double stddev = 0.0;           ///< Sample standard deviation (n - 1); 0 for n < 2.
  double ci95_half_width = 0.0;  ///< Half-width of the 95% confidence interval of the mean
                                 ///< (Student's t); 0 for n < 2.
  /// Coefficient of variation, stddev / mean (0 when mean is 0).
  [[nodiscard]] double cv() const noexcept { return mean != 0.0 ? stddev / mean : 0.0; }
};

/// Summarises `samples`. Throws ka::ValueError when `samples` is empty.
Summary summarize(std::vector<double> samples);

/// Two-sided 95% quantile of Student's t with `dof` degrees of freedom (dof >= 1).
double student_t95(std::size_t dof);

}  // namespace ka::profiler
