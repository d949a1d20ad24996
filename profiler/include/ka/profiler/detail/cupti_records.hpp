// Parsing CUPTI activity records into GpuActivity values and joining them to ka task ids.
// Plain code over record structs, so tests feed it synthetic records without a GPU.
#pragma once

#include <ka/profiler/cupti_profiler.hpp>

#include <cupti.h>

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace ka::profiler::detail {

// Note [CUPTI record versions]
// The record structs are versioned (Kernel9, Kernel10, ...); a libcupti fills the newest
// version its own headers declare, so these must come from the headers shipped with the
// libcupti we link (profiler/CMakeLists.txt finds both in the same toolkit). Only fields every
// recent version keeps (kind, times, ids, name, bytes) are read. Memcpy6 needs CUDA 12.8 or
// newer; CMake builds the stub for older toolkits.
#if CUPTI_API_VERSION >= 130000
using KernelRecord = CUpti_ActivityKernel10;
#else
using KernelRecord = CUpti_ActivityKernel9;
#endif
using MemcpyRecord = CUpti_ActivityMemcpy6;
using MemsetRecord = CUpti_ActivityMemset4;
using ExternalCorrelationRecord = CUpti_ActivityExternalCorrelation;

/// The external-correlation kind ka pushes its task ids under.
inline constexpr CUpti_ExternalCorrelationKind kTaskCorrelationKind =
    CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;

/// "HtoD", "DtoH", "DtoD", ... for a CUpti_ActivityMemcpyKind value.
const char* memcpy_kind_name(std::uint32_t copy_kind) noexcept;

/// The demangled form of a C++ symbol, or `name` itself when it is not a mangled name.
std::string demangle(const char* name);

/// Accumulates activity records (in any order, across any number of buffers) and hands out
/// GpuActivity values with task ids joined through external-correlation records.
class ActivityParser {
 public:
  /// Folds one record in. Kernel, memcpy, memset and external-correlation (of
  /// kTaskCorrelationKind) records are used; others are counted by ignored().
  void consume(const CUpti_Activity& record);

  /// The activities consumed so far, each with the task id of its correlation id when that
  /// record has arrived; removes them. Correlations are kept for activities still to come.
  [[nodiscard]] std::vector<GpuActivity> take();

  /// Forgets everything, including correlations.
  void clear();

  [[nodiscard]] std::size_t pending() const noexcept { return activities_.size(); }
  [[nodiscard]] std::size_t correlations() const noexcept { return task_of_.size(); }
  [[nodiscard]] std::size_t ignored() const noexcept { return ignored_; }

 private:
  std::vector<GpuActivity> activities_;
  std::unordered_map<std::uint32_t, std::uint64_t> task_of_;  // CUPTI correlation id → task
  std::size_t ignored_ = 0;
};

/// Sets task_id on every activity whose correlation id is in `task_of` (leaves the rest).
void join_task_ids(std::vector<GpuActivity>& activities,
                   const std::unordered_map<std::uint32_t, std::uint64_t>& task_of);

}  // namespace ka::profiler::detail
