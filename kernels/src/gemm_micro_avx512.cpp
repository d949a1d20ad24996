// AVX-512 micro-kernel: 6 x 32 floats, 12 zmm accumulators. Compiled with -mavx512f -mfma and
// only called after the CPU was checked for AVX-512 (see gemm_cpu_isa()).
#include "gemm_internal.hpp"

#include <immintrin.h>

#include <algorithm>

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

// B's slivers with unit-stride rows: two 16-float copies per k (std::copy's call per 128
// bytes cost 3% of a 1024^3 GEMM); a partial sliver's masked loads read only its columns and
// fill the rest with zeros.
void pack_b_avx512(const float* src, std::int64_t s0, std::int64_t s1, std::int64_t k0,
                   std::int64_t kb, std::int64_t col0, std::int64_t cols, std::int64_t nr,
                   float* dst) {
  if (s1 != 1 || nr != 32) {
    pack_b_generic(src, s0, s1, k0, kb, col0, cols, nr, dst);
    return;
  }
  for (std::int64_t s = 0; s * 32 < cols; ++s) {
    float* out = dst + s * 32 * kb;
    const float* in = src + k0 * s0 + col0 + s * 32;
    const std::int64_t width = std::min<std::int64_t>(32, cols - s * 32);
    if (width == 32) {
      for (std::int64_t k = 0; k < kb; ++k) {
        _mm512_storeu_ps(out + k * 32, _mm512_loadu_ps(in + k * s0));
        _mm512_storeu_ps(out + k * 32 + 16, _mm512_loadu_ps(in + k * s0 + 16));
      }
      continue;
    }
    const auto lanes = [](std::int64_t n) {
      return static_cast<__mmask16>(n >= 16 ? 0xFFFF : n <= 0 ? 0 : (1U << n) - 1U);
    };
    const __mmask16 lo = lanes(width);
    const __mmask16 hi = lanes(width - 16);
    for (std::int64_t k = 0; k < kb; ++k) {
      _mm512_storeu_ps(out + k * 32, _mm512_maskz_loadu_ps(lo, in + k * s0));
      _mm512_storeu_ps(out + k * 32 + 16, _mm512_maskz_loadu_ps(hi, in + k * s0 + 16));
    }
  }
}

}  // namespace

MicroKernelInfo micro_kernel_avx512() {
  return {"avx512", 32, &micro_6x32, &pack_a_avx2, &pack_b_avx512};
}

}  // namespace ka::kernels::detail
