// The kernels ka ships: one per op family and device type. The extractor
// registers them, and tools that only need their names and versions (ka-db)
// list them here, without libtorch.
#pragma once

#include <ka/core/device.hpp>
#include <ka/kernels/kernel_descriptor.hpp>
#include <vector>

namespace ka::kernels {

/// The op families ka has a built-in kernel for, each on the CPU and all but
/// kAttention (a fusion pattern: fused attention) on CUDA.
enum class OpFamily { kElementwise, kGemm, kBmm, kSoftmax, kLayerNorm, kSum, kAttention };

/// Every OpFamily, in declaration order.
inline constexpr OpFamily kOpFamilies[] = {OpFamily::kElementwise, OpFamily::kGemm,
                                           OpFamily::kBmm,         OpFamily::kSoftmax,
                                           OpFamily::kLayerNorm,   OpFamily::kSum,
                                           OpFamily::kAttention};

/// Whether `family` has a kernel on `device` (kCPU: all; kCUDA: all but kAttention).
bool has_builtin_kernel(OpFamily family, DeviceType device) noexcept;

/// ka's kernel for `family` on `device`. Throws ka::ValueError for a device
/// type other than kCPU and kCUDA, ka::NotImplementedError where the family
/// has none on that device (has_builtin_kernel).
const KernelDescriptor &builtin_kernel(OpFamily family, DeviceType device);

/// The built-in kernels this build registers: every family's CPU kernel and,
/// when CUDA is compiled in (cuda_compiled()), the CUDA kernels.
std::vector<const KernelDescriptor *> builtin_kernels();

}  // namespace ka::kernels
