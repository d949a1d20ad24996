// AVX-512 micro-kernel: 6 x 32 floats, 12 zmm accumulators. Compiled with -mavx512f -mfma and
// only called after the CPU was checked for AVX-512 (see gemm_cpu_isa()).
#include "gemm_internal.hpp"

#include <immintrin.h>

namespace ka::kernels::detail {
namespace {

void micro_6x32(std::int64_t kc, const float* a, const float* b, float* c, std::int64_t ldc,
                float alpha) {
  // The C tile's rows are far apart and were last touched a K block ago: fetch them while
  // the K loop runs (every line of a row, aligned or not).
  for (int r = 0; r < kMicroRows; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + 16), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + 31), _MM_HINT_T0);
  }
  __m512 acc[kMicroRows][2];
  for (auto& row : acc) {
    row[0] = _mm512_setzero_ps();
    row[1] = _mm512_setzero_ps();
  }
  for (std::int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_loadu_ps(b);
    const __m512 b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 6
    for (int r = 0; r < kMicroRows; ++r) {
      const __m512 ar = _mm512_set1_ps(a[r]);
      acc[r][0] = _mm512_fmadd_ps(ar, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(ar, b1, acc[r][1]);
    }
    a += kMicroRows;
    b += 32;
  }
  const __m512 va = _mm512_set1_ps(alpha);
#pragma GCC unroll 6
  for (int r = 0; r < kMicroRows; ++r) {
    float* row = c + r * ldc;
    _mm512_storeu_ps(row, _mm512_fmadd_ps(va, acc[r][0], _mm512_loadu_ps(row)));
    _mm512_storeu_ps(row + 16, _mm512_fmadd_ps(va, acc[r][1], _mm512_loadu_ps(row + 16)));
  }
}

}  // namespace

MicroKernelInfo micro_kernel_avx512() { return {"avx512", 32, &micro_6x32}; }

}  // namespace ka::kernels::detail
