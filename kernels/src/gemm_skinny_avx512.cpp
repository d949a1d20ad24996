// Skinny-M GEMM path (decode shapes, M <= kSkinnyMaxRows), AVX-512: B is streamed straight
// from memory, never packed, each element read once with every row of A applied to it (Note
// [Skinny rows in one pass]). Compiled with -mavx512f -mfma; called only on AVX-512 CPUs.
#include "gemm_internal.hpp"

#include <immintrin.h>

#include <ka/core/error.hpp>

#include <algorithm>
#include <array>
#include <utility>

namespace ka::kernels::detail {
namespace {

// Note [Skinny rows in one pass]
// A decode GEMM's cost is reading B once. Sweeping a narrow strip of B down K before the next
// strip makes every row of the strip a new page (B's rows are 16 KiB apart at N = 4096), and
// the strip's rows all fall in a few of the L2's sets, so a group of rows that revisits it
// reads it from memory again. So B is read along its rows: kSkinnyRowsPerPass rows at a time
// (for_each_skinny_pass), each as a contiguous stream across the task's columns, every row of
// A applied to each vector of B as it arrives; C (M x the task's columns) stays in L1/L2
// between passes. AVX-512 holds R rows x V vectors of 16 columns in registers, R x V <= 16
// (M <= 4 takes 64 columns per step, <= 8 takes 32, <= 16 takes 16); AVX2 has half the
// registers, half as wide (gemm_skinny_avx2.cpp).
#ifndef KA_SKINNY_HINT
#define KA_SKINNY_HINT _MM_HINT_T1
#endif

// C[0:R, 0:16V] += alpha * A_block @ B[0:kb, 0:16V], columns past `w` masked; `ap` holds the
// pass's A block k-major (ap[k * R + r] = A[r, k0 + k]), so the broadcasts share one pointer
// (with R row pointers GCC ran out of general registers and spilled the accumulators).
template <int R, int V, bool Full>
void rows_x_strip_impl(const float* ap, const float* b, const float* next, std::int64_t ldb, float* c,
                  std::int64_t ldc, std::int64_t w, std::int64_t kb, float alpha) {
  __mmask16 mask[V];
  for (int q = 0; q < V; ++q) {
    const std::int64_t live = std::clamp<std::int64_t>(w - 16 * q, 0, 16);
    mask[q] = static_cast<__mmask16>((1U << live) - 1U);
  }
  __m512 acc[R][V];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int q = 0; q < V; ++q) acc[r][q] = _mm512_setzero_ps();
  }
  for (std::int64_t k = 0; k < kb; ++k) {
    if (next != nullptr) {
      for (int q = 0; q < V; ++q) {
        _mm_prefetch(reinterpret_cast<const char*>(next + k * ldb + 16 * q), KA_SKINNY_HINT);
      }
    }
    __m512 bv[V];
    if (Full) {
      for (int q = 0; q < V; ++q) bv[q] = _mm512_loadu_ps(b + k * ldb + 16 * q);
    } else {
      for (int q = 0; q < V; ++q) bv[q] = _mm512_maskz_loadu_ps(mask[q], b + k * ldb + 16 * q);
    }
    const float* ak = ap + k * R;
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 ar = _mm512_set1_ps(ak[r]);
#pragma GCC unroll 4
      for (int q = 0; q < V; ++q) acc[r][q] = _mm512_fmadd_ps(ar, bv[q], acc[r][q]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha);
  // Unrolled like the k loop: an acc indexed by a run-time r would live in memory, and GCC
  // then stores every accumulator on every k.
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int q = 0; q < V; ++q) {
      float* cr = c + r * ldc + 16 * q;
      const __m512 old = _mm512_maskz_loadu_ps(mask[q], cr);
      _mm512_mask_storeu_ps(cr, mask[q], _mm512_fmadd_ps(va, acc[r][q], old));
    }
  }
}

template <int R, int V>
void rows_x_strip(const float* ap, const float* b, const float* next, std::int64_t ldb, float* c,
                  std::int64_t ldc, std::int64_t w, std::int64_t kb, float alpha) {
  if (w == 16 * V) {
    rows_x_strip_impl<R, V, true>(ap, b, next, ldb, c, ldc, w, kb, alpha);
  } else {
    rows_x_strip_impl<R, V, false>(ap, b, next, ldb, c, ldc, w, kb, alpha);
  }
}

using StripFn = void (*)(const float*, const float*, const float*, std::int64_t, float*,
                         std::int64_t, std::int64_t, std::int64_t, float);

// The strip kernel for M rows (1..kSkinnyMaxRows) and its width in columns.
template <int R>
constexpr StripFn strip_for() {
  return R <= 4 ? &rows_x_strip<R, 4> : R <= 8 ? &rows_x_strip<R, 2> : &rows_x_strip<R, 1>;
}
constexpr std::int64_t strip_width(std::int64_t m) { return m <= 4 ? 64 : m <= 8 ? 32 : 16; }

template <int... R>
constexpr std::array<StripFn, sizeof...(R)> strip_table(std::integer_sequence<int, R...>) {
  return {strip_for<R + 1>()...};
}
constexpr auto kStrips = strip_table(std::make_integer_sequence<int, kSkinnyMaxRows>());

}  // namespace

void skinny_columns_avx512(const SkinnyArgs& s, std::int64_t col_begin, std::int64_t col_end) {
  KA_ASSERT(s.m >= 1 && s.m <= kSkinnyMaxRows, "skinny GEMM path with M = ", s.m);
  const StripFn strip = kStrips[static_cast<std::size_t>(s.m - 1)];
  const std::int64_t width = strip_width(s.m);
  for_each_skinny_pass(s, [&](const float* ap, std::int64_t kb, const float* b,
                              const float* next) {
    for (std::int64_t j = col_begin; j < col_end; j += width) {
      strip(ap, b + j, next != nullptr ? next + j : nullptr, s.ldb, s.c + (j - col_begin),
            s.ldc, std::min(width, col_end - j), kb, s.alpha);
    }
  });
}

}  // namespace ka::kernels::detail
