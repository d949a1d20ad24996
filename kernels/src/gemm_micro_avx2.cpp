// AVX2+FMA micro-kernel: 6 x 16 floats, 12 ymm accumulators. Compiled with -mavx2 -mfma and
// only called after the CPU was checked for both (see gemm_cpu_isa()).
#include "gemm_internal.hpp"

#include <immintrin.h>

namespace ka::kernels::detail {
namespace {

void micro_6x16(std::int64_t kc, const float* a, const float* b, float* c, std::int64_t ldc,
                float alpha) {
  // The C tile's rows are far apart and were last touched a K block ago: fetch them while
  // the K loop runs (every line of a row, aligned or not).
  for (int r = 0; r < kMicroRows; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + 15), _MM_HINT_T0);
  }
  __m256 acc[kMicroRows][2];
  for (auto& row : acc) {
    row[0] = _mm256_setzero_ps();
    row[1] = _mm256_setzero_ps();
  }
  for (std::int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b);
    const __m256 b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
    for (int r = 0; r < kMicroRows; ++r) {
      const __m256 ar = _mm256_broadcast_ss(a + r);
      acc[r][0] = _mm256_fmadd_ps(ar, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(ar, b1, acc[r][1]);
    }
    a += kMicroRows;
    b += 16;
  }
  const __m256 va = _mm256_set1_ps(alpha);
#pragma GCC unroll 6
  for (int r = 0; r < kMicroRows; ++r) {
    float* row = c + r * ldc;
    _mm256_storeu_ps(row, _mm256_fmadd_ps(va, acc[r][0], _mm256_loadu_ps(row)));
    _mm256_storeu_ps(row + 8, _mm256_fmadd_ps(va, acc[r][1], _mm256_loadu_ps(row + 8)));
  }
}

}  // namespace

MicroKernelInfo micro_kernel_avx2() { return {"avx2", 16, &micro_6x16}; }

}  // namespace ka::kernels::detail
