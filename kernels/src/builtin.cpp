#include <ka/core/error.hpp>
#include <ka/kernels/builtin.hpp>
#include <ka/kernels/elementwise.hpp>
#include <ka/kernels/gemm.hpp>
#include <ka/kernels/reduction.hpp>

namespace ka::kernels {
namespace {

struct FamilyKernels {
  const KernelDescriptor &(*cpu)();
  const KernelDescriptor &(*cuda)();
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
  }
  KA_ASSERT(false, "unknown op family ", static_cast<int>(family));
  return {};
}

}  // namespace

const KernelDescriptor &builtin_kernel(OpFamily family, DeviceType device) {
  KA_CHECK(device == DeviceType::kCPU || device == DeviceType::kCUDA,
           "ka has built-in kernels for CPU and CUDA only");
  const FamilyKernels k = kernels_of(family);
  return device == DeviceType::kCUDA ? k.cuda() : k.cpu();
}

std::vector<const KernelDescriptor *> builtin_kernels() {
  std::vector<const KernelDescriptor *> out;
  for (const OpFamily f : kOpFamilies) out.push_back(&kernels_of(f).cpu());
  if (cuda_compiled()) {
    for (const OpFamily f : kOpFamilies) out.push_back(&kernels_of(f).cuda());
  }
  return out;
}

}  // namespace ka::kernels
