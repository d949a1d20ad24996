// What a CUDA device allows one kernel launch (threads and shared memory per block, registers),
// read from the device where one is visible, and recorded for the GPUs ka is tuned on so that
// the checks are testable on machines without one. CUDA-free header.
#pragma once

#include <ka/core/fingerprint.hpp>
#include <ka/core/launch_config.hpp>
#include <ka/core/status.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ka::kernels {

/// A device's per-launch limits (cudaDeviceProp's fields of the same meaning).
struct CudaDeviceLimits {
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  int max_threads_per_block = 0;
  int warp_size = 0;
  std::int64_t shared_per_block = 0;        ///< Without opting in (sharedMemPerBlock).
  /// After cudaFuncSetAttribute raises a kernel's limit (sharedMemPerBlockOptin).
  std::int64_t shared_per_block_optin = 0;
  int regs_per_block = 0;
  int max_regs_per_thread = 0;
  std::int64_t l2_bytes = 0;
  std::int64_t memory_bytes = 0;  ///< 0 where not recorded.
  int clock_mhz = 0;              ///< The SMs' peak clock; 0 where not recorded.
  int memory_clock_mhz = 0;       ///< 0 where not recorded.

  /// Recorded from NVIDIA's published figures for these parts (CUDA programming guide,
  /// compute-capability tables, and the datasheets); the H200's L2 is the size its CUDA
  /// runtime reports (cudaDeviceProp::l2CacheSize).
  static CudaDeviceLimits h100_sxm();
  static CudaDeviceLimits h200();
  static CudaDeviceLimits a100_sxm();
};

/// FP32 lanes (CUDA cores) per SM of compute capability `cc_major`.`cc_minor`: 64 on sm_60,
/// sm_70, sm_75 and sm_80 (P100, V100, Turing, A100), 128 on sm_61 and from sm_86 on (Ampere
/// consumer parts, Ada, Hopper, Blackwell), per the CUDA programming guide's throughput table.
int fp32_lanes_per_sm(int cc_major, int cc_minor);
/// The datasheet's fp32 peak: SMs × fp32 lanes × 2 FLOP (an FMA) × the SMs' peak clock, in
/// GFLOP/s; 0 where the clock is not known.
double cuda_fp32_peak_gflops(const CudaDeviceLimits& limits);

/// The limits of CUDA device 0 (cudaGetDeviceProperties), read once; nullopt where this build
/// has no CUDA or no device is visible.
std::optional<CudaDeviceLimits> current_cuda_limits();

/// The fingerprint tuned CUDA entries are keyed by, from a device's limits and the driver's and
/// runtime's CUDA versions as cudaDriverGetVersion / cudaRuntimeGetVersion give them (13000 is
/// "13.0"): name, sm_XY, SMs, L2, memory, clocks, versions.
DeviceFingerprint cuda_fingerprint(const CudaDeviceLimits& limits, int driver_version,
                                   int runtime_version);
/// CUDA device 0's fingerprint; nullopt where this build has no CUDA or no device is visible.
std::optional<DeviceFingerprint> current_cuda_fingerprint();

/// What one launch needs. 0 means unknown and is not checked.
struct CudaLaunchNeeds {
  std::int64_t threads_per_block = 0;
  std::int64_t static_shared_bytes = 0;   ///< __shared__ arrays (limit: shared_per_block).
  std::int64_t dynamic_shared_bytes = 0;  ///< Launch-time shared memory (limit: the opt-in one).
  std::int64_t regs_per_thread = 0;       ///< From cudaFuncGetAttributes or ptxas -v.
};

/// The needs of a complete CUDA launch configuration: its block's threads and its
/// shared_mem_bytes (static shared memory, which is what ka's CUDA kernels use).
CudaLaunchNeeds launch_needs(const LaunchConfig& config);

/// Ok when `needs` fits `limits`; otherwise unsupported, naming the kernel, the limit, the
/// device and both numbers ("sgemm_smem_tiled: 2048 threads per block, NVIDIA H100 SXM
/// allows 1024").
Status check_cuda_launch(const CudaDeviceLimits& limits, const CudaLaunchNeeds& needs,
                         std::string_view kernel);

/// check_cuda_launch against current_cuda_limits() when a device is visible; ok otherwise (the
/// descriptors' can_run call it, so configs are also checked against the device they will run
/// on, not only against constants).
Status check_cuda_launch_here(const LaunchConfig& config, std::string_view kernel);

}  // namespace ka::kernels
