// Skinny-M GEMM path (decode shapes, M <= kSkinnyMaxRows), AVX2 + FMA: B streamed unpacked
// along its rows, every row of A applied to each vector of B as it arrives (Note [Skinny rows
// in one pass]). Compiled with -mavx2 -mfma; called only on CPUs that have both.
#include "gemm_internal.hpp"
#include "gemm_skinny_dot.hpp"

#include <immintrin.h>

#include <ka/core/error.hpp>

#include <algorithm>
#include <array>

namespace ka::kernels::detail {
namespace {

// Note [AVX2 skinny row groups]
// AVX2 has 16 ymm registers of 8 floats where AVX-512 has 32 of 16, so the AVX-512 layout
// (up to 16 rows' accumulators at once) does not fit. A strip holds R rows x V vectors of
// accumulators plus V vectors of B and one broadcast: at most 6 rows over 16 columns (12
// accumulators, the packed micro-kernel's budget) or 2 rows over 32. Taller M runs its rows
// in balanced groups (M = 16: 6 + 5 + 5), each walking all the pass's columns; the pass's rows
// of B (kSkinnyRowsPerPass, or kAvx2LongPassRows, x the task's columns) are still in L1 or L2 for
// the second and third group, so B is read from memory once.

// Note [AVX2 skinny prefetch only across groups]
// The AVX-512 path prefetches the next pass's rows while it reads this one's. With one group
// of rows (M <= 6) the same prefetch made the read slower: on Zen 3, the AVX2-only CPU this
// path serves natively, by about 1.2-1.5x at M = 1 (T0, T1, NTA and two passes ahead alike;
// commit c4712ea's body), and on an Intel Xeon forced to AVX2 by 1.1-1.2x: the CPU's own
// stream prefetchers follow the pass's row streams, and software prefetches only compete
// with them. With several groups (M > 6) only the first reads B from memory; the others
// compute from L1 and L2, and with nothing demanded from memory the stream prefetchers idle
// too. There every group prefetches its share of the next pass (Note [Every group prefetches
// a share]), into L1, which took 16 x 4096 x 11008 from 38 to 51-54 GFLOP/s on the Xeon.

// Lanes [0, live) of a ymm set (live clamped to [0, 8]), for masked loads and stores.
inline __m256i lanes(std::int64_t live) {
  const auto n = static_cast<int>(std::clamp<std::int64_t>(live, 0, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// C[0:R, 0:8V] += alpha * A_group @ B[0:kb, 0:8V], columns past `w` masked; ap[k * lda + r]
// is A[r, k] of this group; Depth > 0: kb == Depth (Note [Skinny passes of a known depth]).
// Always inlined into its group_x_columns: a call per strip, which GCC chose once two of
// those shared it, cost M = 16 a fifth of its speed.
template <int R, int V, bool Full, std::int64_t Depth>
inline __attribute__((always_inline)) void group_x_strip_impl(
    const float* ap, std::int64_t lda, const float* b, NextPassShare next, std::int64_t ldb,
    float* c, std::int64_t ldc, std::int64_t w, std::int64_t kb, float alpha) {
  __m256i mask[V];
  for (int q = 0; q < V; ++q) mask[q] = lanes(w - 8 * q);
  __m256 acc[R][V];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int q = 0; q < V; ++q) acc[r][q] = _mm256_setzero_ps();
  }
  std::int64_t due = next.rows != nullptr ? next.first : kb;  // the next row to prefetch
  for_each_pass_row<Depth>(kb, [&](std::int64_t k) __attribute__((always_inline)) {
    if (k == due) {
      for (int q = 0; q < V; q += 2) {  // 16 columns: one cache line where B is aligned
        _mm_prefetch(reinterpret_cast<const char*>(next.rows + k * ldb + 8 * q), _MM_HINT_T0);
      }
      due += next.step;
    }
    __m256 bv[V];
#pragma GCC unroll 4
    for (int q = 0; q < V; ++q) {
      bv[q] = Full ? _mm256_loadu_ps(b + k * ldb + 8 * q)
                   : _mm256_maskload_ps(b + k * ldb + 8 * q, mask[q]);
    }
    const float* ak = ap + k * lda;
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 ar = _mm256_broadcast_ss(ak + r);
#pragma GCC unroll 4
      for (int q = 0; q < V; ++q) acc[r][q] = _mm256_fmadd_ps(ar, bv[q], acc[r][q]);
    }
  });
  const __m256 va = _mm256_set1_ps(alpha);
  // Unrolled like the k loop: an acc indexed by a run-time r would live in memory.
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int q = 0; q < V; ++q) {
      float* cr = c + r * ldc + 8 * q;
      if (Full) {
        _mm256_storeu_ps(cr, _mm256_fmadd_ps(va, acc[r][q], _mm256_loadu_ps(cr)));
      } else {
        const __m256 old = _mm256_maskload_ps(cr, mask[q]);
        _mm256_maskstore_ps(cr, mask[q], _mm256_fmadd_ps(va, acc[r][q], old));
      }
    }
  }
}

// The group's rows over all `cols` columns of the pass, one call per group and pass (a call
// per strip cost as much as a strip's FMAs at M = 16). `Prefetch`: the group prefetches its
// share of the next pass (Note [AVX2 skinny prefetch only across groups]).
template <int R, int V, bool Prefetch>
void group_x_columns(const float* ap, std::int64_t lda, const float* b, NextPassShare next,
                     std::int64_t ldb, float* c, std::int64_t ldc, std::int64_t cols,
                     std::int64_t kb, float alpha) {
  if (!Prefetch) next.rows = nullptr;
  // The groups that prefetch (M > 6) run long passes where the task allows (Note [AVX2 long
  // skinny passes]), the others kSkinnyRowsPerPass.
  constexpr std::int64_t kDepth = Prefetch ? kAvx2LongPassRows : kSkinnyRowsPerPass;
  for_each_pass_strip<8 * V, kDepth>(cols, kb, next, [&](std::int64_t j, std::int64_t w,
                                                         NextPassShare at_j, auto full,
                                                         auto depth) {
    group_x_strip_impl<R, V, decltype(full)::value, decltype(depth)::value>(
        ap, lda, b + j, at_j, ldb, c + j, ldc, w, kb, alpha);
  });
}

constexpr int kMaxGroupRows = kAvx2MaxGroupRows;
// One group of 1..6 rows over 16 columns, or of 1..2 rows over 32; and the groups of 1..6 rows
// over 16 columns of a taller M, which prefetch.
constexpr std::array<SkinnyGroupKernel, kMaxGroupRows> kNarrow = {
    &group_x_columns<1, 2, false>, &group_x_columns<2, 2, false>, &group_x_columns<3, 2, false>,
    &group_x_columns<4, 2, false>, &group_x_columns<5, 2, false>, &group_x_columns<6, 2, false>};
constexpr std::array<SkinnyGroupKernel, 2> kWide = {&group_x_columns<1, 4, false>,
                                                    &group_x_columns<2, 4, false>};
constexpr std::array<SkinnyGroupKernel, kMaxGroupRows> kGroups = {
    &group_x_columns<1, 2, true>, &group_x_columns<2, 2, true>, &group_x_columns<3, 2, true>,
    &group_x_columns<4, 2, true>, &group_x_columns<5, 2, true>, &group_x_columns<6, 2, true>};

// Note [AVX2 long skinny passes]
// Each pass ends by adding every group's accumulators to C: over 8 rows of B, one C load and
// store per 8 FMAs per accumulator. Where M takes several groups (M > 6, compute-bound), passes
// of 16 rows halve that traffic, as long as the pass (read again by the second and third
// group, Note [AVX2 skinny row groups]) stays within kAvx2LongPassBytes, half of Zen 3's 512
// KiB L2: tasks of at most kAvx2LongPassCols columns, which the heuristic gives such shapes
// (Note [Skinny column tasks]). The figures are in the commit bodies.

// The vector type of skinny_dot_columns.
struct Avx2Floats {
  using T = __m256;
  static constexpr int kWidth = 8;
  static T zero() { return _mm256_setzero_ps(); }
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static T load_first(const float* p, int n) {
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lanes));
  }
  static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static float sum(T v) {
    const __m128 half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 pair = _mm_add_ps(half, _mm_movehl_ps(half, half));
    return _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps(pair, pair, 1)));
  }
};

}  // namespace

// Up to 3 rows of A x 3 columns of B: 9 accumulators, 3 vectors of B and one of A in AVX2's
// 16 registers (4 x 4 would need 21 and spill).
void skinny_dot_avx2(const SkinnyArgs& s, std::int64_t col_begin, std::int64_t col_end) {
  KA_ASSERT(s.m >= 1 && s.m <= kSkinnyMaxRows, "skinny GEMM path with M = ", s.m);
  skinny_dot_columns<Avx2Floats, 3, 3>(s, col_begin, col_end);
}

void skinny_columns_avx2(const SkinnyArgs& s, std::int64_t col_begin, std::int64_t col_end) {
  KA_ASSERT(s.m >= 1 && s.m <= kSkinnyMaxRows, "skinny GEMM path with M = ", s.m);
  const bool wide = s.m <= 2;
  const bool groups = s.m > kMaxGroupRows;
  // Balanced groups of at most kMaxGroupRows rows. Note [AVX2 skinny row groups].
  const auto kernel_for = [&](std::int64_t rows) {
    const auto i = static_cast<std::size_t>(rows - 1);
    return wide ? kWide[i] : groups ? kGroups[i] : kNarrow[i];
  };
  // Note [AVX2 long skinny passes]
  if (s.m > kMaxGroupRows && col_end - col_begin <= kAvx2LongPassCols) {
    run_skinny_groups<kAvx2LongPassRows>(s, col_begin, col_end, kMaxGroupRows, kernel_for);
  } else {
    run_skinny_groups<kSkinnyRowsPerPass>(s, col_begin, col_end, kMaxGroupRows, kernel_for);
  }
}

}  // namespace ka::kernels::detail
