// KA_CUDA_CHECK and KA_CUDA_CHECK_FOR: the one wrapper around CUDA runtime calls (STYLE.md,
// "Errors"). Include only from sources compiled with the CUDA runtime's headers (targets that
// link CUDA::cudart); core itself does not need CUDA.
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

/// As KA_CUDA_CHECK, with what the call was for: "... / call: '<expr>' (<what>)".
#define KA_CUDA_CHECK_FOR(expr, what)                                                          \
  do {                                                                                         \
    const cudaError_t ka_cuda_status_ = (expr);                                                \
    if (ka_cuda_status_ != cudaSuccess) {                                                      \
      KA_THROW(::ka::CudaError, ::ka::detail::source_location(__FILE__, __LINE__),            \
               ": CUDA call failed: ", cudaGetErrorName(ka_cuda_status_), ": ",               \
               cudaGetErrorString(ka_cuda_status_), " / call: '" #expr "' (", what, ")");      \
    }                                                                                          \
  } while (false)
