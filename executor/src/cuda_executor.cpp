#include <ka/core/error.hpp>
#include <ka/executor/cuda_executor.hpp>

#include <string>
#include <utility>
#include <vector>

#if defined(KA_HAVE_CUDA)
#include <ka/core/cuda_check.hpp>

#include <cuda_runtime_api.h>
#endif

namespace ka::executor {

#if defined(KA_HAVE_CUDA)

bool cuda_device_available(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why != nullptr) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
    return false;
  }
  if (count == 0) {
    if (why != nullptr) *why = "no CUDA device visible";
    return false;
  }
  return true;
}

void cuda_stream_synchronize(void* stream, const std::string& what) {
  KA_CUDA_CHECK_FOR(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), what);
}

std::string cuda_context_error() {
  if (cudaDeviceSynchronize() == cudaSuccess) return {};
  static_cast<void>(cudaGetLastError());  // a non-sticky error ends here
  const cudaError_t again = cudaDeviceSynchronize();
  if (again == cudaSuccess) return {};
  return std::string(cudaGetErrorName(again)) + ": " + cudaGetErrorString(again);
}

struct CudaExecutor::Impl {
  struct Entry {
    KernelTask task;
    cudaEvent_t done = nullptr;
  };
  Device device;
  std::vector<cudaStream_t> streams;
  std::size_t next_stream = 0;
  std::vector<Entry> in_flight;
  std::vector<std::pair<std::uint64_t, std::vector<std::uint64_t>>> history;
  std::uint64_t next_id = 1;

  void release_finished() {
    std::vector<Entry> still;
    for (Entry& e : in_flight) {
      if (cudaEventQuery(e.done) == cudaSuccess) {
        cudaEventDestroy(e.done);
      } else {
        still.push_back(std::move(e));
      }
    }
    in_flight = std::move(still);
  }
};

CudaExecutor::CudaExecutor(Device device, int streams) : impl_(std::make_unique<Impl>()) {
  KA_CHECK(device.type == DeviceType::kCUDA, "CudaExecutor: ", device.str(),
           " is not a CUDA device");
  KA_CHECK(streams >= 1, "CudaExecutor: streams must be >= 1, got ", streams);
  impl_->device = device;
  KA_CUDA_CHECK_FOR(cudaSetDevice(device.index), device.str());
  for (int i = 0; i < streams; ++i) {
    cudaStream_t s = nullptr;
    KA_CUDA_CHECK_FOR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), device.str());
    impl_->streams.push_back(s);
  }
}

CudaExecutor::~CudaExecutor() {
  for (cudaStream_t s : impl_->streams) cudaStreamSynchronize(s);
  for (auto& e : impl_->in_flight) cudaEventDestroy(e.done);
  for (cudaStream_t s : impl_->streams) cudaStreamDestroy(s);
}

std::uint64_t CudaExecutor::submit(KernelTask task) {
  KA_CHECK(task.device == impl_->device, "CudaExecutor(", impl_->device.str(), "): task ",
           task.label, " is for ", task.device.str());
  KA_CHECK(static_cast<bool>(task.cuda_launch), "CudaExecutor: task ", task.label,
           " has no CUDA launch");
  impl_->release_finished();
  if (task.id == 0) task.id = impl_->next_id++;
  cudaStream_t stream = impl_->streams[impl_->next_stream++ % impl_->streams.size()];
  const std::string what = task.label + " config " + (task.config ? task.config->str() : "-");
  task.dependencies.clear();
  for (const auto& e : impl_->in_flight) {
    if (depends_on(task, e.task)) {
      KA_CUDA_CHECK_FOR(cudaStreamWaitEvent(stream, e.done, 0), what);
      task.dependencies.push_back(e.task.id);
    }
  }
  task.cuda_launch(stream);
  KA_CUDA_CHECK_FOR(cudaGetLastError(), what);
  Impl::Entry entry;
  KA_CUDA_CHECK_FOR(cudaEventCreateWithFlags(&entry.done, cudaEventDisableTiming), what);
  KA_CUDA_CHECK_FOR(cudaEventRecord(entry.done, stream), what);
  const std::uint64_t id = task.id;
  impl_->history.emplace_back(id, task.dependencies);
  entry.task = std::move(task);
  impl_->in_flight.push_back(std::move(entry));
  return id;
}

void CudaExecutor::synchronize() {
  for (cudaStream_t s : impl_->streams) {
    KA_CUDA_CHECK_FOR(cudaStreamSynchronize(s), impl_->device.str());
  }
  impl_->release_finished();
}

#else  // !KA_HAVE_CUDA

bool cuda_device_available(std::string* why) {
  if (why != nullptr) *why = "this build of ka was compiled without CUDA";
  return false;
}

void cuda_stream_synchronize(void* /*stream*/, const std::string& what) {
  KA_THROW(NotImplementedError, "cuda_stream_synchronize (", what,
           "): this build of ka was compiled without CUDA");
}

std::string cuda_context_error() { return {}; }

struct CudaExecutor::Impl {
  std::vector<std::pair<std::uint64_t, std::vector<std::uint64_t>>> history;
};

CudaExecutor::CudaExecutor(Device device, int /*streams*/) {
  KA_THROW(NotImplementedError, "CudaExecutor(", device.str(),
           "): this build of ka was compiled without CUDA");
}
CudaExecutor::~CudaExecutor() = default;
std::uint64_t CudaExecutor::submit(KernelTask /*task*/) {
  KA_THROW(NotImplementedError, "CudaExecutor: compiled without CUDA");
}
void CudaExecutor::synchronize() {}

#endif

std::vector<std::uint64_t> CudaExecutor::dependencies_of(std::uint64_t id) const {
  for (const auto& [task_id, deps] : impl_->history) {
    if (task_id == id) return deps;
  }
  return {};
}

}  // namespace ka::executor
