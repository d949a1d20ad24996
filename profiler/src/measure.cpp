#include <ka/core/error.hpp>
#include <ka/core/fingerprint.hpp>
#include <ka/profiler/measure.hpp>

#include "measure_loop.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <mutex>

namespace ka::profiler {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Calls fn `calls` times and returns the wall time in ns.
double time_calls(const std::function<void()>& fn, int calls) {
  const auto start = Clock::now();
  for (int i = 0; i < calls; ++i) fn();
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count();
}

// Note [When to test the CI target]
// The relative CI needs the samples sorted, O(n log n). Testing after every
// sample would make long runs quadratic, so the test runs after each of the first 64 samples
// and then whenever the count has grown by 1/32 — the stopping point overshoots by at most
// ~3%, far less than the run-to-run noise it is guarding against.
bool should_test_ci(std::size_t n) {
  if (n <= 64) return true;
  return n % std::max<std::size_t>(1, n / 32) == 0;
}

// The relative CI95 half-width that the stopping rule tests, computed exactly (two-pass
// variance: running sums of squares cancel catastrophically for near-identical samples).
double rel_ci95_of(const std::vector<double>& samples, CiOf ci_of) {
  const std::size_t n = samples.size();
  if (n < 2) return INFINITY;
  std::vector<double> sorted(samples);
  std::sort(sorted.begin(), sorted.end());
  const double median = quantile_sorted(sorted, 0.5);
  double half = 0.0;
  if (ci_of == CiOf::kMedian) {
    half = median_ci95(sorted).half_width();
  } else {
    double mean = 0.0;
    for (const double v : sorted) mean += v;
    mean /= static_cast<double>(n);
    double sq = 0.0;
    for (const double v : sorted) sq += (v - mean) * (v - mean);
    half = student_t95(n - 1) * std::sqrt(sq / static_cast<double>(n - 1) / static_cast<double>(n));
  }
  if (median <= 0.0) return half == 0.0 ? 0.0 : INFINITY;
  return half / median;
}

struct FlushBuffer {
  std::mutex mutex;
  std::unique_ptr<unsigned char[]> data;
  std::int64_t bytes = 0;
  unsigned char pass = 0;
};

volatile unsigned flush_sink = 0;

FlushBuffer& flush_buffer() {
  static FlushBuffer buffer;
  return buffer;
}

}  // namespace

const char* to_string(CacheMode mode) noexcept { return mode == CacheMode::kHot ? "hot" : "cold"; }

const char* to_string(CiOf ci) noexcept { return ci == CiOf::kMedian ? "median" : "mean"; }

const char* to_string(StopReason reason) noexcept {
  switch (reason) {
    case StopReason::kCiTargetMet:
      return "ci-target-met";
    case StopReason::kBudget:
      return "budget";
    case StopReason::kMaxRepetitions:
      return "max-repetitions";
  }
  return "unknown";
}

std::int64_t default_flush_bytes() {
  static const std::int64_t bytes = [] {
    // Note [Flush size without a known L3]: a guest whose sysfs lists no caches still has an
    // L3 (ka::cpu_fingerprint() leaves it 0 rather than trust the guest's CPUID). Twice the L2
    // there would leave the callee's data in L3, and "cold" would mean L3-warm; 64 MiB covers
    // the L3 that one core reaches on today's server parts (32 MiB per Zen CCD).
    constexpr std::int64_t kUnknownL3Flush = std::int64_t{64} << 20;
    const DeviceFingerprint fp = cpu_fingerprint();
    if (fp.l3_bytes > 0) return 2 * fp.l3_bytes;
    return std::max(kUnknownL3Flush, 2 * fp.l2_bytes);
  }();
  return bytes;
}

std::int64_t flush_caches(std::int64_t bytes) {
  if (bytes <= 0) bytes = default_flush_bytes();
  FlushBuffer& buffer = flush_buffer();
  const std::lock_guard<std::mutex> lock(buffer.mutex);
  if (buffer.bytes < bytes) {
    buffer.data = std::make_unique<unsigned char[]>(static_cast<std::size_t>(bytes));
    buffer.bytes = bytes;
  }
  // Write (a new value each pass, so the stores cannot be elided) then read every cache line:
  // dirty lines of the callee's data are evicted by the writes, clean ones by the reads.
  constexpr std::int64_t kLine = 64;
  unsigned char* data = buffer.data.get();
  const unsigned char value = ++buffer.pass;
  for (std::int64_t i = 0; i < bytes; i += kLine) data[i] = value;
  unsigned sum = 0;
  for (std::int64_t i = 0; i < bytes; i += kLine) sum += data[i];
  // Keep the reads: the sum escapes through a volatile store.
  flush_sink = sum;
  return bytes;
}

double Measurement::rel_ci95() const noexcept {
  if (summary.median == 0.0) return 0.0;
  const double half = ci_of == CiOf::kMedian ? median_ci95.half_width() : summary.ci95_half_width;
  return half / summary.median;
}

std::string format_duration_ns(double ns) {
  const double mag = std::fabs(ns);
  const char* unit = "ns";
  double v = ns;
  if (mag >= 1e9) {
    unit = "s";
    v = ns / 1e9;
  } else if (mag >= 1e6) {
    unit = "ms";
    v = ns / 1e6;
  } else if (mag >= 1e3) {
    unit = "us";
    v = ns / 1e3;
  }
  const double av = std::fabs(v);
  const int decimals = av >= 100 ? 0 : av >= 10 ? 1 : 2;
  char text[48];
  std::snprintf(text, sizeof text, "%.*f %s", decimals, v, unit);
  return text;
}

std::string Measurement::str() const {
  if (samples_ns.empty()) return "no samples";
  char pct[32];
  std::string out = format_duration_ns(summary.median) + " median of " +
                    std::to_string(repetitions()) + " (" + to_string(mode);
  out += batch == 1 ? ", 1 call/sample" : ", " + std::to_string(batch) + " calls/sample";
  std::snprintf(pct, sizeof pct, "%.2g%%", rel_ci95() * 100.0);
  out += "), CI95 ";
  if (std::isfinite(rel_ci95())) {
    out += "±";
    out += pct;
    out += " of ";
    out += to_string(ci_of);
  } else {
    out += "of ";
    out += to_string(ci_of);
    out += ci_of == CiOf::kMedian ? " unknown (needs 6 samples)" : " unknown (needs 2 samples)";
  }
  std::snprintf(pct, sizeof pct, "%.2g%%", target_rel_ci95 * 100.0);
  out += " (target ";
  out += pct;
  out += ": ";
  switch (stop) {
    case StopReason::kCiTargetMet:
      out += "met";
      break;
    case StopReason::kBudget:
      out += "not met, budget ended";
      break;
    case StopReason::kMaxRepetitions:
      out += "not met, max repetitions";
      break;
  }
  out += "), min " + format_duration_ns(summary.min) + ", mean " + format_duration_ns(summary.mean);
  const std::size_t n_out = outliers.total();
  out += ", " + std::to_string(n_out) + (n_out == 1 ? " outlier" : " outliers");
  return out;
}

namespace detail {

namespace {

void check_options(const MeasureOptions& o) {
  KA_CHECK(o.warmup_runs >= 0, "measure: warmup_runs must be >= 0, got ", o.warmup_runs);
  KA_CHECK(o.min_repetitions >= 1, "measure: min_repetitions must be >= 1, got ",
           o.min_repetitions);
  KA_CHECK(o.max_repetitions >= o.min_repetitions, "measure: max_repetitions (", o.max_repetitions,
           ") is below min_repetitions (", o.min_repetitions, ")");
  KA_CHECK(o.target_rel_ci95 > 0.0, "measure: target_rel_ci95 must be > 0, got ",
           o.target_rel_ci95);
  KA_CHECK(o.budget_s > 0.0, "measure: budget_s must be > 0, got ", o.budget_s);
  KA_CHECK(o.batch >= 0, "measure: batch must be >= 0 (0 = automatic), got ", o.batch);
}

// Grows the batch until one sample lasts o.min_sample_s (within the budget); a call that takes
// longer on its own needs no batching. `last_call_ns` is the last warm-up call's time (0: none).
// Each size is judged by the shorter of two samples: one interrupted sample (a context switch
// is tens of microseconds, as long as a whole sample of a tiny function) would otherwise stop
// the growth early and leave every later sample shorter than min_sample_s.
int automatic_batch(const std::function<double(int)>& time_calls, const MeasureOptions& o,
                    double last_call_ns, Clock::time_point start) {
  const double target_ns = o.min_sample_s * 1e9;
  if (last_call_ns <= 0.0) last_call_ns = time_calls(1);
  int batch = 1;
  double sample_ns = last_call_ns;
  while (sample_ns < target_ns && batch < (1 << 20) && seconds_since(start) < o.budget_s) {
    const double grow = sample_ns > 0.0 ? target_ns / sample_ns : 16.0;
    batch = static_cast<int>(std::min<double>(
        1 << 20, std::ceil(static_cast<double>(batch) * std::clamp(grow * 1.2, 2.0, 16.0))));
    sample_ns = time_calls(batch);
    sample_ns = std::min(sample_ns, time_calls(batch));
  }
  return batch;
}

}  // namespace

Measurement measure_loop(const Sampler& sampler, const MeasureOptions& o) {
  check_options(o);

  const auto start = Clock::now();
  Measurement m;
  m.mode = o.mode;
  m.target_rel_ci95 = o.target_rel_ci95;
  m.ci_of = o.ci_of;
  const bool cold = o.mode == CacheMode::kCold;
  if (cold) m.flush_bytes = sampler.flush_bytes;
  auto flush = [&] {
    if (!cold) return;
    sampler.flush();
    ++m.flushes;
  };
  const auto& time_calls = sampler.time;

  // Warm-up: at least warmup_runs calls and warmup_s seconds, within the budget. The last
  // call's time seeds the automatic batch size.
  double last_call_ns = 0.0;
  while (m.warmup_runs < o.warmup_runs || (o.warmup_s > 0.0 && seconds_since(start) < o.warmup_s)) {
    if (m.warmup_runs > 0 && seconds_since(start) >= o.budget_s) break;
    flush();
    last_call_ns = time_calls(1);
    ++m.warmup_runs;
  }

  m.batch = cold ? 1 : o.batch;
  if (m.batch == 0) {
    m.batch = automatic_batch(sampler.time, o, last_call_ns, start);
  }

  const auto max_reps = static_cast<std::size_t>(o.max_repetitions);
  const auto min_reps = static_cast<std::size_t>(o.min_repetitions);
  m.samples_ns.reserve(std::min<std::size_t>(max_reps, 4096));
  for (;;) {
    flush();
    const double per_call = time_calls(m.batch) / static_cast<double>(m.batch);
    m.samples_ns.push_back(per_call);
    const std::size_t n = m.samples_ns.size();
    if (n >= min_reps && should_test_ci(n) &&
        rel_ci95_of(m.samples_ns, o.ci_of) <= o.target_rel_ci95) {
      m.stop = StopReason::kCiTargetMet;
      break;
    }
    if (n >= max_reps) {
      m.stop = StopReason::kMaxRepetitions;
      break;
    }
    if (seconds_since(start) >= o.budget_s) {
      m.stop = StopReason::kBudget;
      break;
    }
  }
  m.summary = summarize(m.samples_ns);
  m.outliers = tukey_outliers(m.samples_ns);
  {
    std::vector<double> sorted(m.samples_ns);
    std::sort(sorted.begin(), sorted.end());
    m.median_ci95 = median_ci95(sorted);
  }
  m.elapsed_s = seconds_since(start);
  return m;
}

}  // namespace detail

Measurement measure(const std::function<void()>& fn, const MeasureOptions& o) {
  KA_CHECK(static_cast<bool>(fn), "measure: no function to measure");
  detail::Sampler sampler;
  sampler.time = [&fn](int calls) { return time_calls(fn, calls); };
  if (o.mode == CacheMode::kCold) {
    sampler.flush_bytes = o.flush_bytes > 0 ? o.flush_bytes : default_flush_bytes();
    sampler.flush = [&sampler] { flush_caches(sampler.flush_bytes); };
  }
  return detail::measure_loop(sampler, o);
}

}  // namespace ka::profiler
