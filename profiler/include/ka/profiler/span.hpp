// Spans: named, nested, per-thread timing of pipeline stages (dispatch, extract, execute),
// tagged with ka task ids and exportable as a Chrome trace (DESIGN.md §6).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ka::profiler {

/// A task id meaning "no task".
inline constexpr std::uint64_t kNoTask = ~std::uint64_t{0};

/// One finished span, as collected.
struct Span {
  std::string name;
  std::string category;  ///< "cpu" for ScopedSpan; "kernel", "memcpy" ... for GPU work.
  std::uint64_t task_id = kNoTask;
  std::int64_t start_ns = 0;  ///< steady_clock time since its epoch.
  std::int64_t end_ns = 0;
  std::uint32_t track = 0;    ///< CPU spans: a small per-thread number; GPU: the stream.
  std::uint32_t process = 0;  ///< 0 for host threads; 1 + device ordinal for GPU work.
  std::uint32_t depth = 0;    ///< Nesting depth on its thread (0 = outermost).
  [[nodiscard]] std::int64_t duration_ns() const noexcept { return end_ns - start_ns; }
};

/// Per-name totals over collected spans.
struct SpanStats {
  std::string name;
  std::uint64_t count = 0;
  std::int64_t total_ns = 0;
  std::int64_t min_ns = 0;
  std::int64_t max_ns = 0;
  [[nodiscard]] double mean_ns() const noexcept {
    return count != 0 ? static_cast<double>(total_ns) / static_cast<double>(count) : 0.0;
  }
};

namespace detail {
struct RawSpan {
  const char* name;
  std::uint64_t task_id;
  std::int64_t start_ns;
  std::int64_t end_ns;
  std::uint32_t depth;
};
struct ThreadSpans;
}  // namespace detail

/// Collects spans from any number of threads. Recording goes to a per-thread buffer (an
/// uncontended lock); when disabled, a span costs one relaxed atomic load. The process-wide
/// recorder is global(); separate instances are for tests and tools.
///
///   auto& rec = ka::profiler::SpanRecorder::global();
///   rec.set_enabled(true);
///   { KA_SPAN("extract", task.id); ... }
///   rec.write_chrome_trace("trace.json");
class SpanRecorder {
 public:
  SpanRecorder();
  ~SpanRecorder();
  SpanRecorder(const SpanRecorder&) = delete;
  SpanRecorder& operator=(const SpanRecorder&) = delete;

  /// The process-wide recorder, disabled until set_enabled(true) (or KA_TRACE=1 in the
  /// environment at first use).
  static SpanRecorder& global();

  void set_enabled(bool enabled) noexcept { enabled_.store(enabled, std::memory_order_relaxed); }
  [[nodiscard]] bool enabled() const noexcept { return enabled_.load(std::memory_order_relaxed); }

  /// Adds a finished span from elsewhere (e.g. GPU activity from CuptiProfiler). Thread-safe;
  /// recorded even when disabled, since the caller has already paid for it.
  void add(Span span);

  /// All spans finished so far (still-open spans are not included), ordered by start time.
  [[nodiscard]] std::vector<Span> collect() const;
  /// Drops every recorded span and resets dropped().
  void clear();

  /// Bounds each thread's buffer (default 1 Mi spans, ~40 MiB): a trace left enabled in a long
  /// run stops growing, and the spans it could not keep are counted by dropped().
  void set_max_spans_per_thread(std::size_t max_spans);
  /// Spans lost to the per-thread bound since the last clear().
  [[nodiscard]] std::uint64_t dropped() const;

  /// Per-name count, total, min and max over collect(), sorted by total time, largest first.
  [[nodiscard]] std::vector<SpanStats> aggregate() const;

  /// The spans as Chrome trace JSON ({"traceEvents": [...]}: complete events, ph "X", ts and
  /// dur in µs since the earliest span, args.task_id when set), loadable by chrome://tracing
  /// and Perfetto.
  [[nodiscard]] std::string chrome_trace_json() const;
  /// Writes chrome_trace_json() to `path`. Throws ka::IoError when the file cannot be written.
  void write_chrome_trace(const std::string& path) const;

  // Used by ScopedSpan.
  /// The calling thread's buffer for this recorder, created on first use.
  detail::ThreadSpans& thread_buffer();
  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }

 private:
  std::atomic<bool> enabled_{false};
  std::uint64_t id_;
  mutable std::mutex mutex_;  // Guards threads_ and external_.
  std::vector<std::shared_ptr<detail::ThreadSpans>> threads_;
  std::vector<Span> external_;
  std::size_t max_spans_per_thread_ = std::size_t{1} << 20;  // Guarded by mutex_.
};

/// Records [construction, destruction) as a span named `name` on `recorder` when it is
/// enabled. `name` must outlive the recorder's use of it: pass a string literal.
class ScopedSpan {
 public:
  explicit ScopedSpan(const char* name, std::uint64_t task_id = kNoTask,
                      SpanRecorder& recorder = SpanRecorder::global()) noexcept;
  ~ScopedSpan();
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

 private:
  detail::ThreadSpans* buffer_ = nullptr;  // Null when the recorder was disabled at entry.
  const char* name_;
  std::uint64_t task_id_;
  std::int64_t start_ns_ = 0;
};

/// steady_clock now, ns since its epoch: the time base of every Span.
std::int64_t now_ns() noexcept;

}  // namespace ka::profiler

#define KA_SPAN_CONCAT_INNER(a, b) a##b
#define KA_SPAN_CONCAT(a, b) KA_SPAN_CONCAT_INNER(a, b)
/// `KA_SPAN("extract", task_id);` times the rest of the enclosing scope on the global recorder.
#define KA_SPAN(...) ::ka::profiler::ScopedSpan KA_SPAN_CONCAT(ka_span_, __LINE__)(__VA_ARGS__)
