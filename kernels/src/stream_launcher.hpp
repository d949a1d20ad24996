// StreamLauncher: how the CUDA kernels' run_* functions launch on a GPU (the host-emulated
// tests pass test::simt::Launcher instead). Only .cu files include it: it uses <<<>>>.
#pragma once

#include <ka/core/cuda_check.hpp>

#if defined(__CUDACC__)
namespace ka::kernels::cuda_detail {

/// A run_* launcher (launch(kernel, grid, block, args...)): the kernel on `stream`, then its
/// launch error, if any, as ka::CudaError. The tests' twin is test::simt::Launcher.
struct StreamLauncher {
  cudaStream_t stream;
  template <typename... Params, typename... Args>
  void operator()(void (*kernel)(Params...), dim3 grid, dim3 block, const Args&... args) const {
    kernel<<<grid, block, 0, stream>>>(args...);
    KA_CUDA_CHECK(cudaGetLastError());
  }
};

}  // namespace ka::kernels::cuda_detail
#endif
