// measure_cuda and CudaEventTimer: measure()'s method with CUDA events as the clock.
#include <ka/core/error.hpp>
#include <ka/profiler/measure.hpp>

#include "measure_loop.hpp"

#include <string>

#if defined(KA_HAVE_CUDA)
#include <ka/core/cuda_check.hpp>

#include <cuda_runtime_api.h>
#endif

namespace ka::profiler {

#if defined(KA_HAVE_CUDA)

struct CudaEventTimer::Impl {
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
};

CudaEventTimer::CudaEventTimer(void* stream) : impl_(std::make_unique<Impl>()) {
  impl_->stream = static_cast<cudaStream_t>(stream);
  KA_CUDA_CHECK_FOR(cudaEventCreate(&impl_->start), "CudaEventTimer");
  const cudaError_t err = cudaEventCreate(&impl_->stop);
  if (err != cudaSuccess) cudaEventDestroy(impl_->start);
  KA_CUDA_CHECK_FOR(err, "CudaEventTimer");
}

CudaEventTimer::~CudaEventTimer() {
  cudaEventDestroy(impl_->start);
  cudaEventDestroy(impl_->stop);
}

void CudaEventTimer::start() {
  KA_CUDA_CHECK_FOR(cudaEventRecord(impl_->start, impl_->stream), "CudaEventTimer::start");
}

double CudaEventTimer::stop_ns() {
  KA_CUDA_CHECK_FOR(cudaEventRecord(impl_->stop, impl_->stream), "CudaEventTimer::stop_ns");
  KA_CUDA_CHECK_FOR(cudaEventSynchronize(impl_->stop),
                         "CudaEventTimer::stop_ns: the timed work failed");
  float ms = 0.0F;
  KA_CUDA_CHECK_FOR(cudaEventElapsedTime(&ms, impl_->start, impl_->stop),
                         "CudaEventTimer::stop_ns");
  return static_cast<double>(ms) * 1e6;
}

namespace {

// Device memory written before each cold call: twice the L2 unless the options say otherwise.
class DeviceFlush {
 public:
  DeviceFlush(std::int64_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes <= 0) {
      int device = 0;
      int l2 = 0;
      KA_CUDA_CHECK_FOR(cudaGetDevice(&device), "measure_cuda: cold flush");
      KA_CUDA_CHECK_FOR(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device),
                             "measure_cuda: cold flush");
      bytes = l2 > 0 ? 2 * static_cast<std::int64_t>(l2) : std::int64_t{128} << 20;
    }
    bytes_ = bytes;
    KA_CUDA_CHECK_FOR(cudaMalloc(&data_, static_cast<std::size_t>(bytes_)),
                           "measure_cuda: cold flush buffer");
  }
  ~DeviceFlush() { cudaFree(data_); }
  DeviceFlush(const DeviceFlush&) = delete;
  DeviceFlush& operator=(const DeviceFlush&) = delete;

  void operator()() {
    KA_CUDA_CHECK_FOR(
        cudaMemsetAsync(data_, ++pass_, static_cast<std::size_t>(bytes_), stream_),
        "measure_cuda: cold flush");
  }
  [[nodiscard]] std::int64_t bytes() const noexcept { return bytes_; }

 private:
  cudaStream_t stream_;
  void* data_ = nullptr;
  std::int64_t bytes_ = 0;
  unsigned char pass_ = 0;
};

}  // namespace

Measurement measure_cuda(const std::function<void(void* stream)>& enqueue,
                         const MeasureOptions& o, void* stream) {
  KA_CHECK(static_cast<bool>(enqueue), "measure_cuda: no function to measure");
  CudaEventTimer timer(stream);
  std::unique_ptr<DeviceFlush> flush;
  if (o.mode == CacheMode::kCold) {
    flush = std::make_unique<DeviceFlush>(o.flush_bytes, static_cast<cudaStream_t>(stream));
  }
  detail::Sampler sampler;
  sampler.time = [&](int calls) {
    timer.start();
    for (int i = 0; i < calls; ++i) enqueue(stream);
    return timer.stop_ns();
  };
  if (flush) {
    sampler.flush_bytes = flush->bytes();
    sampler.flush = [&flush] { (*flush)(); };
  }
  return detail::measure_loop(sampler, o);
}

#else  // !KA_HAVE_CUDA

struct CudaEventTimer::Impl {};

CudaEventTimer::CudaEventTimer(void* /*stream*/) {
  KA_THROW(NotImplementedError, "CudaEventTimer: this build of ka was compiled without CUDA");
}
CudaEventTimer::~CudaEventTimer() = default;
void CudaEventTimer::start() {}
double CudaEventTimer::stop_ns() { return 0.0; }

Measurement measure_cuda(const std::function<void(void* stream)>& /*enqueue*/,
                         const MeasureOptions& /*options*/, void* /*stream*/) {
  KA_THROW(NotImplementedError, "measure_cuda: this build of ka was compiled without CUDA");
}

#endif

}  // namespace ka::profiler
