// current_cuda_limits() where ka is built with CUDA: cudaGetDeviceProperties of device 0.
#include <ka/kernels/cuda_limits.hpp>

#include <cuda_runtime_api.h>

namespace ka::kernels {

std::optional<CudaDeviceLimits> current_cuda_limits() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    static_cast<void>(cudaGetLastError());  // "no device" is not an error to keep
    return std::nullopt;
  }
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return std::nullopt;
  }
  CudaDeviceLimits l;
  l.name = p.name;
  l.cc_major = p.major;
  l.cc_minor = p.minor;
  l.sm_count = p.multiProcessorCount;
  l.max_threads_per_block = p.maxThreadsPerBlock;
  l.warp_size = p.warpSize;
  l.shared_per_block = static_cast<std::int64_t>(p.sharedMemPerBlock);
  l.shared_per_block_optin = static_cast<std::int64_t>(p.sharedMemPerBlockOptin);
  l.regs_per_block = p.regsPerBlock;
  l.max_regs_per_thread = 255;  // every architecture since Kepler; not in cudaDeviceProp
  l.l2_bytes = p.l2CacheSize;
  return l;
}

}  // namespace ka::kernels
