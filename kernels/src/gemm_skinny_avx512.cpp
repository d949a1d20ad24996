// Skinny-M GEMM path (decode shapes, M <= ~16), AVX-512: B is streamed straight from memory,
// never packed, in strips of 64 columns x tile_k rows that stay in L2 while each group of up
// to 6 rows of A runs over them. Compiled with -mavx512f -mfma; called only on AVX-512 CPUs.
#include "gemm_internal.hpp"

#include <immintrin.h>

#include <algorithm>

namespace ka::kernels::detail {
namespace {

constexpr std::int64_t kStrip = 64;  // columns per strip: 4 zmm

// C[r, j:j+w] += alpha * sum_k A[r, k] * B[k, j:j+w] for R rows and k in [k0, k0 + kb).
template <int R>
void rows_x_strip(const SkinnyArgs& s, std::int64_t row0, std::int64_t j, std::int64_t w,
                  std::int64_t k0, std::int64_t kb) {
  __m512 acc[R][4];
  for (auto& row : acc) {
    for (auto& v : row) v = _mm512_setzero_ps();
  }
  __mmask16 mask[4];
  for (int v = 0; v < 4; ++v) {
    const std::int64_t live = std::clamp<std::int64_t>(w - 16 * v, 0, 16);
    mask[v] = static_cast<__mmask16>((1U << live) - 1U);
  }
  const float* a_rows[R];
  for (int r = 0; r < R; ++r) a_rows[r] = s.a + (row0 + r) * s.a_row_stride + k0 * s.a_col_stride;
  const float* b = s.b + k0 * s.ldb + j;
  for (std::int64_t k = 0; k < kb; ++k) {
    const float* bk = b + k * s.ldb;
    __m512 bv[4];
    for (int v = 0; v < 4; ++v) bv[v] = _mm512_maskz_loadu_ps(mask[v], bk + 16 * v);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m512 ar = _mm512_set1_ps(a_rows[r][k * s.a_col_stride]);
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_fmadd_ps(ar, bv[v], acc[r][v]);
    }
  }
  const __m512 va = _mm512_set1_ps(s.alpha);
  for (int r = 0; r < R; ++r) {
    float* c = s.c + (row0 + r) * s.ldc + j;
    for (int v = 0; v < 4; ++v) {
      const __m512 old = _mm512_maskz_loadu_ps(mask[v], c + 16 * v);
      _mm512_mask_storeu_ps(c + 16 * v, mask[v], _mm512_fmadd_ps(va, acc[r][v], old));
    }
  }
}

void rows_x_strip_any(const SkinnyArgs& s, std::int64_t row0, std::int64_t rows, std::int64_t j,
                      std::int64_t w, std::int64_t k0, std::int64_t kb) {
  switch (rows) {
    case 1: return rows_x_strip<1>(s, row0, j, w, k0, kb);
    case 2: return rows_x_strip<2>(s, row0, j, w, k0, kb);
    case 3: return rows_x_strip<3>(s, row0, j, w, k0, kb);
    case 4: return rows_x_strip<4>(s, row0, j, w, k0, kb);
    case 5: return rows_x_strip<5>(s, row0, j, w, k0, kb);
    default: return rows_x_strip<6>(s, row0, j, w, k0, kb);
  }
}

}  // namespace

void skinny_columns_avx512(const SkinnyArgs& s, std::int64_t col_begin, std::int64_t col_end) {
  for (std::int64_t j = col_begin; j < col_end; j += kStrip) {
    const std::int64_t w = std::min(kStrip, col_end - j);
    for (std::int64_t k0 = 0; k0 < s.k; k0 += s.tile_k) {
      const std::int64_t kb = std::min(s.tile_k, s.k - k0);
      for (std::int64_t row0 = 0; row0 < s.m; row0 += kMicroRows) {
        rows_x_strip_any(s, row0, std::min<std::int64_t>(kMicroRows, s.m - row0), j, w, k0, kb);
      }
    }
  }
}

}  // namespace ka::kernels::detail
