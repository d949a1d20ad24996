// KA_REQUIRE_CUDA_TENSORS(): skips a GoogleTest test, saying why, unless a CUDA device is
// visible and the linked libtorch has CUDA (tensors on the device). For tests/device.
#pragma once

#include <ka/executor/cuda_executor.hpp>

#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <string>

#define KA_REQUIRE_CUDA_TENSORS()                                                        \
  do {                                                                                   \
    std::string why;                                                                     \
    if (!::ka::executor::cuda_device_available(&why)) {                                  \
      GTEST_SKIP() << "no CUDA device: " << why;                                         \
    }                                                                                    \
    if (!at::hasCUDA()) GTEST_SKIP() << "this libtorch has no CUDA: no device tensors";   \
  } while (false)
