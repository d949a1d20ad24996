// Why a GPU test cannot run here: the one check every test in tests/device starts with.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>

namespace ka::test {

/// Why no CUDA device can be used, or "" when one can ("no device" from a driverless machine
/// included: cudaGetDeviceCount's error name and text).
inline std::string no_cuda_device_reason() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  if (count == 0) return "cudaGetDeviceCount found 0 devices";
  return "";
}

}  // namespace ka::test

/// Skips the test, saying `what` and the reason, unless `reason_expr` is empty.
#define KA_SKIP_UNLESS_EMPTY(reason_expr, what)                          \
  do {                                                                   \
    if (const std::string ka_reason = (reason_expr); !ka_reason.empty()) { \
      GTEST_SKIP() << what << ": " << ka_reason;                         \
    }                                                                    \
  } while (false)
