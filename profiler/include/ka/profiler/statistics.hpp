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

/// The `q`-quantile (0 <= q <= 1) of `sorted` (ascending), interpolating linearly between
/// order statistics (Hyndman-Fan type 7, as numpy and R default). Throws ka::ValueError when
/// `sorted` is empty or `q` is outside [0, 1].
double quantile_sorted(const std::vector<double>& sorted, double q);

/// A distribution-free 95% confidence interval of the median: the order statistics
/// [x_(l), x_(n+1-l)] with l the largest rank whose binomial coverage is still >= 95%. Robust to
/// outliers, unlike the Student's t interval of the mean. With fewer than 6 samples no such
/// interval exists and the result is (-inf, +inf).
struct MedianInterval {
  double low = 0.0;
  double high = 0.0;
  [[nodiscard]] double half_width() const noexcept { return 0.5 * (high - low); }
};

/// The 95% confidence interval of the median of `sorted` (ascending). Throws ka::ValueError
/// when `sorted` is empty.
MedianInterval median_ci95(const std::vector<double>& sorted);

/// Samples outside Tukey's fences [Q1 - k·IQR, Q3 + k·IQR] (k = 1.5 by default). They are
/// counted so reports can show them; nothing is removed from the sample.
struct Outliers {
  std::size_t low = 0;   ///< Samples below the lower fence.
  std::size_t high = 0;  ///< Samples above the upper fence.
  double lower_fence = 0.0;
  double upper_fence = 0.0;
  [[nodiscard]] std::size_t total() const noexcept { return low + high; }
};

/// Counts Tukey outliers in `samples`; with fewer than 4 samples nothing is an outlier.
Outliers tukey_outliers(std::vector<double> samples, double k = 1.5);

}  // namespace ka::profiler
