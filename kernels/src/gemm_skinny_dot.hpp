// The skinny-M path for a transposed B (nn.Linear's weight): each output is a dot product of
// a row of A with a contiguous column of B. One template over a vector type, instantiated by
// each ISA's file with its own compile flags (gemm_skinny_avx512.cpp, gemm_skinny_avx2.cpp,
// gemm_micro_generic.cpp).
#pragma once

#include "gemm_internal.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

namespace ka::kernels::detail {

// Note [Skinny dot products]
// F.linear(x, W) multiplies by B = W^T, W row-major N x K: B's columns are W's rows,
// contiguous along K. For decode (M <= kSkinnyMaxRows) the cost is reading W once, and W is
// best read along its rows: C[r, j] is the dot product of A's row r with W's row j. A task
// walks K in blocks of kDotBlockFloats / M floats: the block of A (every row, copied
// contiguous, at most kDotBlockFloats floats) stays in L1 while every column of the task
// streams its rows' piece of W through it, Rows x Cols dot products at a time in registers
// (Cols rows of W read once per group of Rows rows of A, from L1 after the first group); each
// finished block adds its sums onto C (the task's columns, in L1/L2). So W is read from memory
// once, as Cols long streams, and each vector of W feeds Rows FMAs.
constexpr std::int64_t kDotBlockFloats = 8192;

/// C[0:Rows, 0:cols] += alpha * A_block @ W_rows^T over kb floats: A's rows at a + r * lda,
/// W's rows at w[q] (q < Cols; the first `cols` are real, the rest repeat the last and are
/// not stored).
template <class V, int Rows, int Cols>
void dot_tile(const float* a, std::int64_t lda, const std::array<const float*, Cols>& w,
              std::int64_t kb, float* c, std::int64_t ldc, int cols, float alpha) {
  using T = typename V::T;
  T acc[Rows][Cols];
#pragma GCC unroll 16
  for (int r = 0; r < Rows; ++r) {
#pragma GCC unroll 8
    for (int q = 0; q < Cols; ++q) acc[r][q] = V::zero();
  }
  const auto step = [&](std::int64_t k, auto load) {
    T wv[Cols];
#pragma GCC unroll 8
    for (int q = 0; q < Cols; ++q) wv[q] = load(w[static_cast<std::size_t>(q)] + k);
#pragma GCC unroll 16
    for (int r = 0; r < Rows; ++r) {
      const T av = load(a + r * lda + k);
#pragma GCC unroll 8
      for (int q = 0; q < Cols; ++q) acc[r][q] = V::fma(av, wv[q], acc[r][q]);
    }
  };
  std::int64_t k = 0;
  for (; k + V::kWidth <= kb; k += V::kWidth) step(k, [](const float* p) { return V::load(p); });
  if (k < kb) {
    const auto live = static_cast<int>(kb - k);
    step(k, [live](const float* p) { return V::load_first(p, live); });
  }
#pragma GCC unroll 16
  for (int r = 0; r < Rows; ++r) {
#pragma GCC unroll 8
    for (int q = 0; q < Cols; ++q) {
      if (q < cols) c[r * ldc + q] += alpha * V::sum(acc[r][q]);
    }
  }
}

template <class V, int Cols, int... R>
constexpr auto dot_tile_table(std::integer_sequence<int, R...>) {
  using Fn = void (*)(const float*, std::int64_t, const std::array<const float*, Cols>&,
                      std::int64_t, float*, std::int64_t, int, float);
  return std::array<Fn, sizeof...(R)>{&dot_tile<V, R + 1, Cols>...};
}

/// SkinnyColumns for a transposed B (s.b_transposed: element (k, j) at b[j * ldb + k]), with
/// groups of at most MaxRows rows of A over Cols columns. Note [Skinny dot products].
template <class V, int MaxRows, int Cols>
void skinny_dot_columns(const SkinnyArgs& s, std::int64_t col_begin, std::int64_t col_end) {
  static constexpr auto kTiles =
      dot_tile_table<V, Cols>(std::make_integer_sequence<int, MaxRows>());
  const std::int64_t block = std::max<std::int64_t>(
      V::kWidth, kDotBlockFloats / s.m / V::kWidth * V::kWidth);
  thread_local std::vector<float> a_block;
  a_block.resize(static_cast<std::size_t>(s.m * block));
  for (std::int64_t k0 = 0; k0 < s.k; k0 += block) {
    const std::int64_t kb = std::min(block, s.k - k0);
    for (std::int64_t r = 0; r < s.m; ++r) {  // A's block, rows contiguous (any strides)
      const float* src = s.a + r * s.a_row_stride + k0 * s.a_col_stride;
      float* dst = a_block.data() + r * kb;
      for (std::int64_t k = 0; k < kb; ++k) dst[k] = src[k * s.a_col_stride];
    }
    for (std::int64_t j = col_begin; j < col_end; j += Cols) {
      const auto cols = static_cast<int>(std::min<std::int64_t>(Cols, col_end - j));
      std::array<const float*, Cols> w;
      for (int q = 0; q < Cols; ++q) {
        w[static_cast<std::size_t>(q)] = s.b + (j + std::min(q, cols - 1)) * s.ldb + k0;
      }
      for_each_row_group(s.m, MaxRows, [&](std::int64_t r0, std::int64_t rows) {
        kTiles[static_cast<std::size_t>(rows - 1)](a_block.data() + r0 * kb, kb, w, kb,
                                                   s.c + r0 * s.ldc + (j - col_begin), s.ldc,
                                                   cols, s.alpha);
      });
    }
  }
}

}  // namespace ka::kernels::detail
