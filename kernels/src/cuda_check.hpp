// KA_CUDA_CHECK: the one wrapper around CUDA runtime calls (STYLE.md, "Errors").
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
