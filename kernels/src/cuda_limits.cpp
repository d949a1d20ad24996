// Recorded CUDA device limits and the launch check. See cuda_limits.hpp.
#include <ka/kernels/cuda_limits.hpp>

#include <string>

namespace ka::kernels {

CudaDeviceLimits CudaDeviceLimits::h100_sxm() {
  CudaDeviceLimits l;
  l.name = "NVIDIA H100 SXM";
  l.cc_major = 9;
  l.cc_minor = 0;
  l.sm_count = 132;
  l.max_threads_per_block = 1024;
  l.warp_size = 32;
  l.shared_per_block = 48 * 1024;
  l.shared_per_block_optin = 227 * 1024;
  l.regs_per_block = 65536;
  l.max_regs_per_thread = 255;
  l.l2_bytes = std::int64_t{50} << 20;
  l.memory_bytes = std::int64_t{80} << 30;
  l.clock_mhz = 1980;  // max boost (datasheet)
  return l;
}

CudaDeviceLimits CudaDeviceLimits::h200() {
  CudaDeviceLimits l = h100_sxm();  // the same GH100 processor with more, faster memory
  l.name = "NVIDIA H200";
  l.l2_bytes = std::int64_t{60} << 20;
  l.memory_bytes = std::int64_t{141} << 30;
  return l;
}

CudaDeviceLimits CudaDeviceLimits::a100_sxm() {
  CudaDeviceLimits l;
  l.name = "NVIDIA A100-SXM4";
  l.cc_major = 8;
  l.cc_minor = 0;
  l.sm_count = 108;
  l.max_threads_per_block = 1024;
  l.warp_size = 32;
  l.shared_per_block = 48 * 1024;
  l.shared_per_block_optin = 163 * 1024;
  l.regs_per_block = 65536;
  l.max_regs_per_thread = 255;
  l.l2_bytes = std::int64_t{40} << 20;
  l.memory_bytes = std::int64_t{80} << 30;
  l.clock_mhz = 1410;  // max boost (datasheet)
  return l;
}

int fp32_lanes_per_sm(int cc_major, int cc_minor) {
  if (cc_major == 6) return cc_minor == 0 ? 64 : 128;
  if (cc_major == 7) return 64;
  if (cc_major == 8) return cc_minor == 0 ? 64 : 128;
  return cc_major > 8 ? 128 : 64;
}

double cuda_fp32_peak_gflops(const CudaDeviceLimits& limits) {
  return static_cast<double>(limits.sm_count) *
         fp32_lanes_per_sm(limits.cc_major, limits.cc_minor) * 2.0 * limits.clock_mhz / 1000.0;
}

CudaLaunchNeeds launch_needs(const LaunchConfig& config) {
  CudaLaunchNeeds n;
  n.threads_per_block = config.block.x * config.block.y * config.block.z;
  n.static_shared_bytes = config.shared_mem_bytes;
  return n;
}

Status check_cuda_launch(const CudaDeviceLimits& limits, const CudaLaunchNeeds& needs,
                         std::string_view kernel) {
  const auto refuse = [&](const std::string& what, std::int64_t need, std::int64_t allowed) {
    return Status::unsupported(std::string(kernel) + ": " + std::to_string(need) + " " + what +
                               ", " + limits.name + " allows " + std::to_string(allowed));
  };
  if (needs.threads_per_block > limits.max_threads_per_block) {
    return refuse("threads per block", needs.threads_per_block, limits.max_threads_per_block);
  }
  if (needs.static_shared_bytes > limits.shared_per_block) {
    return refuse("bytes of static shared memory per block", needs.static_shared_bytes,
                  limits.shared_per_block);
  }
  if (needs.static_shared_bytes + needs.dynamic_shared_bytes > limits.shared_per_block_optin) {
    return refuse("bytes of shared memory per block",
                  needs.static_shared_bytes + needs.dynamic_shared_bytes,
                  limits.shared_per_block_optin);
  }
  if (needs.regs_per_thread > limits.max_regs_per_thread) {
    return refuse("registers per thread", needs.regs_per_thread, limits.max_regs_per_thread);
  }
  if (needs.regs_per_thread * needs.threads_per_block > limits.regs_per_block) {
    return refuse("registers per block", needs.regs_per_thread * needs.threads_per_block,
                  limits.regs_per_block);
  }
  return Status::ok();
}

Status check_cuda_launch_here(const LaunchConfig& config, std::string_view kernel) {
  static const std::optional<CudaDeviceLimits> here = current_cuda_limits();
  if (!here) return Status::ok();
  return check_cuda_launch(*here, launch_needs(config), kernel);
}

namespace {

// A CUDA version number as the runtime reports it (major * 1000 + minor * 10): "13.0".
std::string cuda_version(int v) {
  return v <= 0 ? std::string() : std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

}  // namespace

DeviceFingerprint cuda_fingerprint(const CudaDeviceLimits& limits, int driver_version,
                                   int runtime_version) {
  DeviceFingerprint fp;
  fp.device = Device::cuda(0);
  fp.name = limits.name;
  fp.isa = "sm_" + std::to_string(limits.cc_major) + std::to_string(limits.cc_minor);
  fp.cores = limits.sm_count;
  fp.l2_bytes = limits.l2_bytes;
  fp.memory_bytes = limits.memory_bytes;
  fp.clock_mhz = limits.clock_mhz;
  fp.memory_clock_mhz = limits.memory_clock_mhz;
  fp.driver_version = cuda_version(driver_version);
  fp.runtime_version = cuda_version(runtime_version);
  return fp;
}

}  // namespace ka::kernels
