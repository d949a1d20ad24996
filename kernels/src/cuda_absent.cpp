// Stand-ins used only when this build has no nvcc: the CUDA GEMM is then reported absent.
#include "gemm_internal.hpp"

#include <ka/core/error.hpp>

namespace ka::kernels {

bool cuda_compiled() noexcept { return false; }

Status gemm_f32_cuda(const AddmmArgs& /*args*/, const LaunchConfig& /*config*/, void* /*stream*/) {
  KA_THROW(NotImplementedError, "gemm_f32_cuda: this build of ka was compiled without CUDA");
}

}  // namespace ka::kernels
