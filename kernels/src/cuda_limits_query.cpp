// current_cuda_limits() and current_cuda_fingerprint() where ka is built with CUDA: device 0's
// properties and attributes, the driver's and runtime's versions.
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
  l.memory_bytes = static_cast<std::int64_t>(p.totalGlobalMem);
  // Clocks are attributes (kHz): cudaDeviceProp's clock fields are gone in CUDA 13.
  int khz = 0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0) == cudaSuccess) {
    l.clock_mhz = khz / 1000;
  }
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, 0) == cudaSuccess) {
    l.memory_clock_mhz = khz / 1000;
  }
  static_cast<void>(cudaGetLastError());
  return l;
}

std::optional<DeviceFingerprint> current_cuda_fingerprint() {
  const std::optional<CudaDeviceLimits> limits = current_cuda_limits();
  if (!limits) return std::nullopt;
  int driver = 0;
  int runtime = 0;
  static_cast<void>(cudaDriverGetVersion(&driver));
  static_cast<void>(cudaRuntimeGetVersion(&runtime));
  return cuda_fingerprint(*limits, driver, runtime);
}

}  // namespace ka::kernels
