// Stand-ins used only when this build has no nvcc: every CUDA kernel is then reported absent.
// The descriptors stay (they are data, compiled everywhere).
#include "gemm_internal.hpp"

#include <ka/core/error.hpp>
#include <ka/kernels/cuda_limits.hpp>
#include <ka/kernels/elementwise.hpp>
#include <ka/kernels/reduction.hpp>

namespace ka::kernels {

bool cuda_compiled() noexcept { return false; }

std::optional<CudaDeviceLimits> current_cuda_limits() { return std::nullopt; }

std::optional<DeviceFingerprint> current_cuda_fingerprint() { return std::nullopt; }

#define KA_CUDA_ABSENT(name) \
  KA_THROW(NotImplementedError, #name ": this build of ka was compiled without CUDA")

Status gemm_f32_cuda(const AddmmArgs& /*args*/, const LaunchConfig& /*config*/, void* /*stream*/) {
  KA_CUDA_ABSENT(gemm_f32_cuda);
}

Status bmm_f32_cuda(const BmmArgs& /*args*/, const LaunchConfig& /*config*/, void* /*stream*/) {
  KA_CUDA_ABSENT(bmm_f32_cuda);
}

Status gemm_bf16_cuda(const AddmmArgs& /*args*/, const LaunchConfig& /*config*/,
                      void* /*stream*/) {
  KA_CUDA_ABSENT(gemm_bf16_cuda);
}

Status elementwise_f32_cuda(const ElementwiseArgs& /*args*/, const LaunchConfig& /*config*/,
                            void* /*stream*/) {
  KA_CUDA_ABSENT(elementwise_f32_cuda);
}

Status softmax_f32_cuda(const SoftmaxArgs& /*args*/, const LaunchConfig& /*config*/,
                        void* /*stream*/) {
  KA_CUDA_ABSENT(softmax_f32_cuda);
}

Status layer_norm_f32_cuda(const LayerNormArgs& /*args*/, const LaunchConfig& /*config*/,
                           void* /*stream*/) {
  KA_CUDA_ABSENT(layer_norm_f32_cuda);
}

Status sum_f32_cuda(const SumArgs& /*args*/, const LaunchConfig& /*config*/, void* /*stream*/) {
  KA_CUDA_ABSENT(sum_f32_cuda);
}

#undef KA_CUDA_ABSENT

}  // namespace ka::kernels
