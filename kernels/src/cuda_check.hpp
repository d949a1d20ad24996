// KA_CUDA_CHECK: the one wrapper around CUDA runtime calls (STYLE.md, "Errors"), and the
// launcher the kernels' run_* functions launch through on a GPU.
#pragma once

#include <ka/core/error.hpp>

#include <cuda_runtime_api.h>

/// Throws ka::CudaError "<file>:<line>: CUDA call failed: <name>: <text> / call: '<expr>'".
#define KA_CUDA_CHECK(expr)                                                                    \
  do {                                                                                         \
    const cudaError_t ka_cuda_status_ = (expr);                                                \
    if (ka_cuda_status_ != cudaSuccess) {                                                      \
      KA_THROW(::ka::CudaError, ::ka::detail::source_location(__FILE__, __LINE__),            \
               ": CUDA call failed: ", cudaGetErrorName(ka_cuda_status_), ": ",               \
               cudaGetErrorString(ka_cuda_status_), " / call: '" #expr "'");                   \
    }                                                                                          \
  } while (false)

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
