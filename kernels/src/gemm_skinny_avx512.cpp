// Skinny-M GEMM path (decode shapes, M <= kSkinnyMaxRows), AVX-512: B is streamed straight
// from memory, never packed, each element read once with every row of A applied to it (Note
// [Skinny rows in one pass]). Compiled with -mavx512f -mfma; called only on AVX-512 CPUs.
#include "gemm_internal.hpp"
#include "gemm_skinny_dot.hpp"

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
// reads it from memory again. So B is read along its rows, a pass of a few rows at a time
// (for_each_skinny_pass; Note [Longer AVX-512 skinny passes]), each as a contiguous stream
// across the task's columns, every row of A applied to each vector of B as it arrives; C
// (M x the task's columns) stays in L1/L2 between passes. The rows go in groups whose
// accumulators fit the registers (Note [AVX-512 skinny row groups], Note [AVX2 skinny row
// groups]).
#ifndef KA_SKINNY_HINT
#define KA_SKINNY_HINT _MM_HINT_T1
#endif

// C[0:R, 0:16V] += alpha * A_group @ B[0:kb, 0:16V], columns past `w` masked; `ap` holds the
// group's rows of the pass's A block k-major (ap[k * lda + r] = A[r, k0 + k]), so the
// broadcasts share one pointer (with R row pointers GCC ran out of general registers and
// spilled the accumulators). Depth > 0: kb == Depth (Note [Skinny passes of a known depth]).
template <int R, int V, bool Full, std::int64_t Depth>
inline __attribute__((always_inline)) void rows_x_strip_impl(
    const float* ap, std::int64_t lda, const float* b, NextPassShare next, std::int64_t ldb,
    float* c, std::int64_t ldc, std::int64_t w, std::int64_t kb, float alpha) {
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
  std::int64_t due = next.rows != nullptr ? next.first : kb;  // the next row to prefetch
  for_each_pass_row<Depth>(kb, [&](std::int64_t k) __attribute__((always_inline)) {
    if (k == due) {
      for (int q = 0; q < V; ++q) {
        _mm_prefetch(reinterpret_cast<const char*>(next.rows + k * ldb + 16 * q), KA_SKINNY_HINT);
      }
      due += next.step;
    }
    __m512 bv[V];
    if (Full) {
      for (int q = 0; q < V; ++q) bv[q] = _mm512_loadu_ps(b + k * ldb + 16 * q);
    } else {
      for (int q = 0; q < V; ++q) bv[q] = _mm512_maskz_loadu_ps(mask[q], b + k * ldb + 16 * q);
    }
    const float* ak = ap + k * lda;
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 ar = _mm512_set1_ps(ak[r]);
#pragma GCC unroll 4
      for (int q = 0; q < V; ++q) acc[r][q] = _mm512_fmadd_ps(ar, bv[q], acc[r][q]);
    }
  });
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

// The group's rows over all `cols` columns of the pass: full strips of 16V columns, then the
// masked tail. One call per group and pass (a call per strip cost as much as a strip's FMAs
// at M = 16). `Depth`: the path's pass depth for these groups (Note [Skinny passes of a
// known depth]).
template <int R, int V, std::int64_t Depth>
void rows_x_columns(const float* ap, std::int64_t lda, const float* b, NextPassShare next,
                    std::int64_t ldb, float* c, std::int64_t ldc, std::int64_t cols,
                    std::int64_t kb, float alpha) {
  for_each_pass_strip<16 * V, Depth>(cols, kb, next, [&](std::int64_t j, std::int64_t w,
                                                         NextPassShare at_j, auto full,
                                                         auto depth) {
    rows_x_strip_impl<R, V, decltype(full)::value, decltype(depth)::value>(
        ap, lda, b + j, at_j, ldb, c + j, ldc, w, kb, alpha);
  });
}

// Note [Longer AVX-512 skinny passes]
// Each pass starts every strip's accumulators at zero and ends by adding them to C, whose M
// rows over the task's columns (16 x 2048 floats: 128 KiB) live in L2, not L1: a masked load
// and store of C per accumulator per pass. Over 8 rows of B that is one C load and store per
// 8 FMAs, and at M > 4 (compute-bound on a machine that streams B at 30 GB/s) C's traffic
// bounds the path. Passes of 32 rows cut it 4x: M = 16 ran 15-20 % faster on Zen 4 (figures
// in the commit body). 64 rows was slower again, and up to 4 rows (where the path reads B at
// memory speed) 32-row passes made M = 1 ~30 % slower, so those keep kSkinnyRowsPerPass. Why
// was not measured (this VM has no cache counters); a likely cause of the M = 1 loss is the
// next pass's prefetch, then 32 rows ahead.
constexpr std::int64_t kLongPassRows = 32;

// Note [AVX-512 skinny row groups]
// Up to 4 rows take 64 columns per strip (4 x 4 accumulators); more rows go in balanced
// groups of at most 8 over 48 columns (8 x 3 accumulators; M = 16: 8 + 8), each group's three
// B vectors feeding all its rows, the second group reading the pass's B from L1 or L2. One
// group of 16 rows over 16 columns issues a broadcast load per FMA (17 loads per 16 FMAs),
// so its loads, not its FMAs, bound it; 8 x 3 issues 11 per 24.
constexpr int kMaxGroupRows = 8;
template <int... R>
constexpr std::array<SkinnyGroupKernel, sizeof...(R)> narrow_table(std::integer_sequence<int, R...>) {
  return {&rows_x_columns<R + 1, 3, kLongPassRows>...};
}
constexpr auto kNarrow = narrow_table(std::make_integer_sequence<int, kMaxGroupRows>());
// Up to 4 rows take kSkinnyRowsPerPass, more rows kLongPassRows (skinny_columns_avx512).
constexpr std::array<SkinnyGroupKernel, 4> kWide = {
    &rows_x_columns<1, 4, kSkinnyRowsPerPass>, &rows_x_columns<2, 4, kSkinnyRowsPerPass>,
    &rows_x_columns<3, 4, kSkinnyRowsPerPass>, &rows_x_columns<4, 4, kSkinnyRowsPerPass>};

// The vector type of skinny_dot_columns.
struct Avx512Floats {
  using T = __m512;
  static constexpr int kWidth = 16;
  static T zero() { return _mm512_setzero_ps(); }
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static T load_first(const float* p, int n) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1U << n) - 1U), p);
  }
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  // Through memory: _mm512_reduce_add_ps and the lane shuffles build on an "undefined" vector
  // that GCC 12 reports as maybe-uninitialized under -Werror. A tile sums each accumulator
  // once per K block, so this is not on the hot loop.
  static float sum(T v) {
    alignas(64) float lanes[kWidth];
    _mm512_store_ps(lanes, v);
    float s = 0.0F;
    for (float x : lanes) s += x;
    return s;
  }
};

}  // namespace

// Up to 4 rows of A x 4 columns of B: 16 accumulators, 4 vectors of B and one of A in 32
// registers; each vector of B feeds 4 FMAs and each of A 4.
void skinny_dot_avx512(const SkinnyArgs& s, std::int64_t col_begin, std::int64_t col_end) {
  KA_ASSERT(s.m >= 1 && s.m <= kSkinnyMaxRows, "skinny GEMM path with M = ", s.m);
  skinny_dot_columns<Avx512Floats, 4, 4>(s, col_begin, col_end);
}

void skinny_columns_avx512(const SkinnyArgs& s, std::int64_t col_begin, std::int64_t col_end) {
  KA_ASSERT(s.m >= 1 && s.m <= kSkinnyMaxRows, "skinny GEMM path with M = ", s.m);
  const bool wide = s.m <= 4;
  const auto kernel_for = [&](std::int64_t rows) {
    return wide ? kWide[static_cast<std::size_t>(rows - 1)]
                : kNarrow[static_cast<std::size_t>(rows - 1)];
  };
  if (wide) {
    run_skinny_groups<kSkinnyRowsPerPass>(s, col_begin, col_end, kMaxGroupRows, kernel_for);
  } else {
    run_skinny_groups<kLongPassRows>(s, col_begin, col_end, kMaxGroupRows, kernel_for);
  }
}

}  // namespace ka::kernels::detail
