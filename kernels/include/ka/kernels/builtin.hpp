// The kernels ka ships: one per op family and device type. The extractor
// registers them, and tools that only need their names and versions (ka-db)
// list them here, without libtorch.
#pragma once

#include <ka/core/device.hpp>
#include <ka/kernels/kernel_descriptor.hpp>
#include <vector>

namespace ka::kernels {

/// The op families ka has a built-in kernel for, each on CPU and CUDA.
enum class OpFamily { kElementwise, kGemm, kBmm, kSoftmax, kLayerNorm, kSum };

/// Every OpFamily, in declaration order.
inline constexpr OpFamily kOpFamilies[] = {OpFamily::kElementwise, OpFamily::kGemm,
                                           OpFamily::kBmm,         OpFamily::kSoftmax,
                                           OpFamily::kLayerNorm,   OpFamily::kSum};

/// ka's kernel for `family` on `device`. Throws ka::ValueError for a device
/// type other than kCPU and kCUDA.
const KernelDescriptor &builtin_kernel(OpFamily family, DeviceType device);

/// The built-in kernels this build registers: every family's CPU kernel and,
/// when CUDA is compiled in (cuda_compiled()), its CUDA kernel.
std::vector<const KernelDescriptor *> builtin_kernels();

}  // namespace ka::kernels
