#include <ka/core/error.hpp>
#include <ka/kernels/attention.hpp>
#include <ka/kernels/builtin.hpp>
#include <ka/kernels/elementwise.hpp>
#include <ka/kernels/gemm.hpp>
#include <ka/kernels/reduction.hpp>

namespace ka::kernels {
namespace {

struct FamilyKernels {
  const KernelDescriptor &(*cpu)();
  const KernelDescriptor &(*cuda)();  ///< null: none on CUDA
};

FamilyKernels kernels_of(OpFamily family) {
  switch (family) {
    case OpFamily::kElementwise:
      return {&elementwise_f32_cpu_descriptor, &elementwise_f32_cuda_descriptor};
    case OpFamily::kGemm:
      return {&gemm_f32_cpu_descriptor, &gemm_f32_cuda_descriptor};
    case OpFamily::kBmm:
      return {&bmm_f32_cpu_descriptor, &bmm_f32_cuda_descriptor};
    case OpFamily::kSoftmax:
      return {&softmax_f32_cpu_descriptor, &softmax_f32_cuda_descriptor};
    case OpFamily::kLayerNorm:
      return {&layer_norm_f32_cpu_descriptor, &layer_norm_f32_cuda_descriptor};
    case OpFamily::kSum:
      return {&sum_f32_cpu_descriptor, &sum_f32_cuda_descriptor};
    case OpFamily::kAttention:
      return {&attention_f32_cpu_descriptor, nullptr};
  }
  KA_ASSERT(false, "unknown op family ", static_cast<int>(family));
  return {};
}

}  // namespace

bool has_builtin_kernel(OpFamily family, DeviceType device) noexcept {
  return device == DeviceType::kCPU || (device == DeviceType::kCUDA && kernels_of(family).cuda);
}

const KernelDescriptor &builtin_kernel(OpFamily family, DeviceType device) {
  KA_CHECK(device == DeviceType::kCPU || device == DeviceType::kCUDA,
           "ka has built-in kernels for CPU and CUDA only");
  const FamilyKernels k = kernels_of(family);
  if (device == DeviceType::kCPU) return k.cpu();
  KA_CHECK_TYPE(NotImplementedError, k.cuda != nullptr, "ka has no CUDA kernel for ",
                k.cpu().name, " (CPU only)");
  return k.cuda();
}

std::vector<const KernelDescriptor *> builtin_kernels() {
  std::vector<const KernelDescriptor *> out;
  for (const OpFamily f : kOpFamilies) out.push_back(&kernels_of(f).cpu());
  if (cuda_compiled()) {
    for (const OpFamily f : kOpFamilies) {
      if (kernels_of(f).cuda != nullptr) out.push_back(&kernels_of(f).cuda());
    }
  }
  return out;
}

}  // namespace ka::kernels
