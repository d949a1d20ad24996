// Portable micro-kernel: 6 x 16 floats in plain C++ (the compiler vectorises what the baseline
// ISA allows). The fallback on CPUs without AVX2.
#include "gemm_internal.hpp"

namespace ka::kernels::detail {
namespace {

constexpr int kCols = 16;

void micro_6x16_portable(std::int64_t kc, const float* a, const float* b, float* c,
                         std::int64_t ldc, float alpha) {
  float acc[kMicroRows][kCols] = {};
  for (std::int64_t k = 0; k < kc; ++k) {
    for (int r = 0; r < kMicroRows; ++r) {
      const float ar = a[r];
      for (int j = 0; j < kCols; ++j) {
        acc[r][j] += ar * b[j];
      }
    }
    a += kMicroRows;
    b += kCols;
  }
  for (int r = 0; r < kMicroRows; ++r) {
    for (int j = 0; j < kCols; ++j) {
      c[r * ldc + j] += alpha * acc[r][j];
    }
  }
}

}  // namespace

MicroKernelInfo micro_kernel_generic() { return {"generic", kCols, &micro_6x16_portable}; }

}  // namespace ka::kernels::detail
