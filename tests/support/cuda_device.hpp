// Why a GPU test cannot run here: the one check every test in tests/device starts with.
#pragma once

#include <ka/executor/cuda_executor.hpp>

#include <gtest/gtest.h>

#include <string>

namespace ka::test {

/// Why no CUDA device can be used (executor::cuda_device_available's reason), or "" when one
/// can.
inline std::string no_cuda_device_reason() {
  std::string why;
  return executor::cuda_device_available(&why) ? "" : why;
}

}  // namespace ka::test

/// Skips the test, saying `what` and the reason, unless `reason_expr` is empty.
#define KA_SKIP_UNLESS_EMPTY(reason_expr, what)                          \
  do {                                                                   \
    if (const std::string ka_reason = (reason_expr); !ka_reason.empty()) { \
      GTEST_SKIP() << what << ": " << ka_reason;                         \
    }                                                                    \
  } while (false)
