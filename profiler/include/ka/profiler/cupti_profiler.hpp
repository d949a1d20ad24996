// GPU activity (kernels, memcpys, memsets) from the CUPTI activity API, correlated to ka task
// ids and exportable as spans beside the host's (DESIGN.md §6). Without CUPTI at build time
// the class exists and says so.
#pragma once

#include <ka/core/status.hpp>
#include <ka/profiler/span.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ka::profiler {

/// What a GPU activity record describes.
enum class GpuActivityKind { kKernel, kMemcpy, kMemset };

/// "kernel", "memcpy" or "memset".
const char* to_string(GpuActivityKind kind) noexcept;

/// One kernel execution or memory operation on the GPU.
struct GpuActivity {
  GpuActivityKind kind = GpuActivityKind::kKernel;
  std::string name;            ///< Demangled kernel name; "memcpy HtoD" etc. for copies.
  std::uint64_t start_ns = 0;  ///< CUPTI timestamps (ns); see CuptiProfiler::to_steady_ns.
  std::uint64_t end_ns = 0;
  std::uint32_t correlation_id = 0;  ///< CUPTI's id linking the record to its API call.
  std::uint32_t stream = 0;
  std::uint32_t device = 0;
  std::uint64_t bytes = 0;          ///< Memcpy/memset size; 0 for kernels.
  std::uint64_t task_id = kNoTask;  ///< The ka task pushed when the work was launched.
  [[nodiscard]] std::uint64_t duration_ns() const noexcept { return end_ns - start_ns; }
};

/// Records GPU kernels, memcpys and memsets through the CUPTI activity API. CUPTI's callbacks
/// are process-wide, so at most one profiler may be started at a time. Work launched while a
/// task id is pushed (ScopedGpuTask) carries that id.
///
///   ka::profiler::CuptiProfiler gpu;
///   if (auto s = gpu.start(); !s) log().warn("no GPU trace: {}", s.reason());
///   { ka::profiler::ScopedGpuTask task(42); launch(); }
///   gpu.stop();                        // flushes CUPTI's buffers
///   for (const auto& a : gpu.take()) ...;   // a.task_id == 42
///   gpu.export_spans(SpanRecorder::global());
class CuptiProfiler {
 public:
  CuptiProfiler();
  ~CuptiProfiler();  ///< Stops if started.
  CuptiProfiler(const CuptiProfiler&) = delete;
  CuptiProfiler& operator=(const CuptiProfiler&) = delete;

  /// Whether this build has CUPTI.
  static bool compiled() noexcept;

  /// Enables activity recording. Returns not-ok with the reason when CUPTI is not compiled,
  /// another profiler is started, or CUPTI refuses (no driver, no device, insufficient
  /// privileges); never throws for those.
  [[nodiscard]] Status start();
  /// Disables recording and flushes every buffer; idempotent. Throws ka::CuptiError when
  /// CUPTI fails while flushing.
  void stop();
  [[nodiscard]] bool started() const noexcept;

  /// The activities completed so far (all of them after stop()), with task ids joined in;
  /// removes them from the profiler.
  [[nodiscard]] std::vector<GpuActivity> take();
  /// Records dropped by CUPTI for lack of buffer space (reported, so a trace is not silently
  /// partial).
  [[nodiscard]] std::uint64_t dropped_records() const noexcept;

  /// Converts a CUPTI timestamp to the steady_clock ns of Span, using an offset taken at
  /// start().
  [[nodiscard]] std::int64_t to_steady_ns(std::uint64_t cupti_ns) const noexcept;
  /// take()s the activities and adds them to `recorder` as spans (category "kernel",
  /// "memcpy" or "memset"; process 1 + device; track = stream). Returns how many.
  std::size_t export_spans(SpanRecorder& recorder);

  /// Tags GPU work launched by this thread from now on with `task_id` (a no-op without
  /// CUPTI or when no profiler is started). Pairs with pop_task().
  static void push_task(std::uint64_t task_id) noexcept;
  static void pop_task() noexcept;

  struct State;  // Defined in the implementation.

 private:
  std::unique_ptr<State> state_;
};

/// Pushes a ka task id for GPU work launched in its scope. See CuptiProfiler.
class ScopedGpuTask {
 public:
  explicit ScopedGpuTask(std::uint64_t task_id) noexcept { CuptiProfiler::push_task(task_id); }
  ~ScopedGpuTask() { CuptiProfiler::pop_task(); }
  ScopedGpuTask(const ScopedGpuTask&) = delete;
  ScopedGpuTask& operator=(const ScopedGpuTask&) = delete;
};

}  // namespace ka::profiler
