// The measurement method (DESIGN.md §6): warm-up, repetitions until the 95% confidence
// interval is tight enough or the time budget ends, hot or cold caches, outliers reported.
#pragma once

#include <ka/profiler/statistics.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ka::profiler {

/// Whether caches are left warm between repetitions or flushed.
enum class CacheMode {
  kHot,   ///< Repetitions run back to back: data the callee touches stays cached.
  kCold,  ///< A buffer larger than the last-level cache is written and read before every
          ///< repetition (not timed), so each call starts from memory.
};

/// "hot" or "cold".
const char* to_string(CacheMode mode) noexcept;

/// Why a measurement stopped taking samples.
enum class StopReason {
  kCiTargetMet,     ///< CI95 half-width / median fell to the target (and min_repetitions ran).
  kBudget,          ///< The time budget ended first.
  kMaxRepetitions,  ///< max_repetitions samples were taken first.
};

/// "ci-target-met", "budget" or "max-repetitions".
const char* to_string(StopReason reason) noexcept;

/// Which 95% confidence interval the stopping rule and rel_ci95() use.
enum class CiOf {
  kMedian,  ///< Distribution-free interval of the median (order statistics): a descheduled
            ///< repetition widens it by one rank, not by its size. Needs >= 6 samples.
  kMean,    ///< Student's t interval of the mean: assumes roughly normal noise; heavy tails
            ///< (preemption, interrupts) keep it wide.
};

/// "median" or "mean".
const char* to_string(CiOf ci) noexcept;

/// How measure() samples a function. The defaults suit kernels from ~1 µs to ~100 ms.
struct MeasureOptions {
  int warmup_runs = 1;            ///< Calls before sampling starts (at least this many) ...
  double warmup_s = 0.0;          ///< ... and for at least this long (seconds).
  int min_repetitions = 5;        ///< Samples taken before the CI target may stop sampling (the
                                  ///< median's interval needs 6 whatever this says).
  int max_repetitions = 1000;     ///< Samples never exceed this.
  double target_rel_ci95 = 0.01;  ///< Stop once CI95 half-width <= this fraction of the median.
  CiOf ci_of = CiOf::kMedian;     ///< The interval the target applies to.
  double budget_s = 1.0;          ///< Wall-time budget (seconds) for warm-up and sampling
                                  ///< together; flushes count. At least one sample is taken.
  CacheMode mode = CacheMode::kHot;
  /// Calls per sample; a sample's time is divided by it. 0 chooses it so a sample lasts at
  /// least min_sample_s (hot mode); cold mode always uses 1, since a flush precedes each call.
  int batch = 0;
  double min_sample_s = 50e-6;  ///< Target sample length when the batch is chosen automatically.
  /// Bytes the cold-mode flush touches; 0 means twice the L3 (from ka::cpu_fingerprint(), or
  /// 64 MiB when unknown).
  std::int64_t flush_bytes = 0;
};

/// The result of measure(): per-call times and what they mean.
struct Measurement {
  std::vector<double> samples_ns;  ///< One per repetition: ns per call, in sampling order.
  Summary summary;                 ///< Of samples_ns: min, median, mean, stddev, CI95 of the mean.
  MedianInterval median_ci95;      ///< 95% interval of the median ((-inf, inf) below 6 samples).
  CiOf ci_of = CiOf::kMedian;      ///< The interval rel_ci95() and the stopping rule use.
  Outliers outliers;               ///< Tukey outliers among samples_ns (reported, kept).
  StopReason stop = StopReason::kBudget;
  CacheMode mode = CacheMode::kHot;
  int batch = 1;                 ///< Calls per sample.
  int warmup_runs = 0;           ///< Calls made during warm-up.
  std::int64_t flushes = 0;      ///< Cache flushes performed (cold mode).
  std::int64_t flush_bytes = 0;  ///< Size of each flush (cold mode), bytes.
  double target_rel_ci95 = 0.0;  ///< The target the run aimed for.
  double elapsed_s = 0.0;        ///< Wall time measure() took, seconds.

  [[nodiscard]] std::size_t repetitions() const noexcept { return samples_ns.size(); }
  [[nodiscard]] double median_ns() const noexcept { return summary.median; }
  /// CI95 half-width (of the median or the mean, per ci_of) as a fraction of the median (0 when
  /// the median is 0; inf when there are too few samples for an interval).
  [[nodiscard]] double rel_ci95() const noexcept;
  [[nodiscard]] bool ci_target_met() const noexcept { return stop == StopReason::kCiTargetMet; }
  /// One line saying what each number is, e.g. "12.3 us median of 23 (hot, 8 calls/sample),
  /// CI95 ±0.6% of median (target 1%: met), min 12.1 us, mean 12.4 us, 1 outlier".
  [[nodiscard]] std::string str() const;
};

/// Times `fn` by the method of DESIGN.md §6 and returns per-call statistics. Exceptions from
/// `fn` propagate. Throws ka::ValueError for inconsistent options (e.g. max < min
/// repetitions, a non-positive target or budget).
///
///   ka::profiler::MeasureOptions options;
///   options.budget_s = 0.5;
///   auto m = ka::profiler::measure([&] { kernel(a, b); }, options);
///   std::cout << m.str();   // "41.2 us median of 37 (hot, 2 calls/sample), CI95 ±0.8% ..."
Measurement measure(const std::function<void()>& fn, const MeasureOptions& options = {});

/// Times GPU work by CUDA events, by the method and stopping rule of measure():
/// `enqueue(stream)` puts one call's work on `stream` (a cudaStream_t; null: the legacy
/// default stream) and returns without waiting. A sample is `batch` calls between two events
/// recorded on the stream and waited for once, so only the device's time counts: the host's
/// launches of a batch overlap the GPU's work, except the first call's launch latency when
/// the GPU was idle (a few µs; the automatic batch makes it small against a 50 µs sample).
/// Cold mode writes `flush_bytes` (0: twice the device's L2) of device memory before each
/// call, outside the events, so each call starts from HBM. Throws ka::NotImplementedError
/// when compiled without CUDA, ka::CudaError when a CUDA call fails, and what `enqueue`
/// throws.
///
///   auto m = ka::profiler::measure_cuda([&](void* s) { call.enqueue(s); }, options);
Measurement measure_cuda(const std::function<void(void* stream)>& enqueue,
                         const MeasureOptions& options = {}, void* stream = nullptr);

/// The device time of what is enqueued on one stream between start() and stop_ns(), by two
/// CUDA events (for harnesses that run their own loop, like Google Benchmark's).
///
///   CudaEventTimer timer;   // legacy default stream
///   timer.start(); launch(); double ns = timer.stop_ns();
class CudaEventTimer {
 public:
  /// Throws ka::NotImplementedError when compiled without CUDA, ka::CudaError when the events
  /// cannot be made (no device).
  explicit CudaEventTimer(void* stream = nullptr);
  ~CudaEventTimer();
  CudaEventTimer(const CudaEventTimer&) = delete;
  CudaEventTimer& operator=(const CudaEventTimer&) = delete;
  /// Records the start event on the stream.
  void start();
  /// Records the stop event, waits for it and returns the ns between the two events.
  /// Throws ka::CudaError when the work in between failed.
  double stop_ns();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Evicts the CPU caches by writing then reading `bytes` bytes (0: twice the last-level
/// cache). Thread-safe; the buffer is allocated once and reused. Returns the bytes touched.
std::int64_t flush_caches(std::int64_t bytes = 0);

/// Twice this CPU's L3 in bytes; 64 MiB (or twice the L2, if larger) when the L3 is unknown.
std::int64_t default_flush_bytes();

/// "12.3 us", "840 ns", "1.52 ms", "2.01 s": a duration with a unit that keeps 3 digits.
std::string format_duration_ns(double ns);

}  // namespace ka::profiler
