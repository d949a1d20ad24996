// CudaExecutor: enqueues KernelTasks on CUDA streams, ordering them with events.
#pragma once

#include <ka/executor/kernel_task.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ka::executor {

/// True when this build compiled the CUDA executor and a CUDA device is visible; `why` (if
/// given) receives the reason when not ("compiled without CUDA", "cudaGetDeviceCount: ...").
bool cuda_device_available(std::string* why = nullptr);

/// Waits for the work on `stream` (a cudaStream_t; null: the legacy default stream). Throws
/// ka::CudaError naming `what` when that work failed, ka::NotImplementedError when compiled
/// without CUDA.
void cuda_stream_synchronize(void* stream, const std::string& what);

/// Empty when this process's CUDA context is usable; else why not: a sticky error (an illegal
/// address, a kernel trap, ...) after which every CUDA call of the process fails, so the
/// process must end. Waits for all work on the current device; an error that a second wait
/// no longer reports was not sticky and is cleared. Empty too without CUDA.
std::string cuda_context_error();

/// The CUDA executor (DESIGN.md §5): each task's `cuda_launch(stream)` enqueues its kernel on
/// one of `streams` streams round-robin; a task whose MemRanges conflict with an unfinished
/// earlier task's waits for that task's completion event (cudaStreamWaitEvent), so
/// independent tasks overlap across streams. Tasks (and the arguments they own) are released
/// once their event has completed.
///
///   CudaExecutor ex(Device::cuda(0));
///   ex.submit(std::move(task));
///   ex.synchronize();
class CudaExecutor {
 public:
  /// Throws ka::NotImplementedError when compiled without CUDA, ka::CudaError when the
  /// device cannot be used.
  explicit CudaExecutor(Device device, int streams = 4);
  ~CudaExecutor();
  CudaExecutor(const CudaExecutor&) = delete;
  CudaExecutor& operator=(const CudaExecutor&) = delete;

  /// Enqueues `task`; returns its id. Throws ka::CudaError (with the task's label and
  /// config) when the launch fails.
  std::uint64_t submit(KernelTask task);
  /// Waits for every stream; releases finished tasks; rethrows asynchronous errors as
  /// ka::CudaError.
  void synchronize();
  /// Ids of the tasks `id` waited for (events), for tests and dumps.
  [[nodiscard]] std::vector<std::uint64_t> dependencies_of(std::uint64_t id) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ka::executor
