// AVX-512 micro-kernels: 6 x 16, 6 x 32 (the default: 12 zmm accumulators) and 6 x 48 floats,
// and their edge tiles.
// Compiled with -mavx512f -mfma and only called after the CPU was checked for AVX-512 (see
// gemm_cpu_isa()).
#include "gemm_internal.hpp"

#include <immintrin.h>

#include <algorithm>

namespace ka::kernels::detail {
namespace {

// Lanes of a vector of 16 columns that fall in a tile `n` columns wide from its start.
inline __mmask16 lanes(std::int64_t n) {
  return static_cast<__mmask16>(n >= 16 ? 0xFFFF : n <= 0 ? 0 : (1U << n) - 1U);
}

// R x (16 * V) floats of C, the first `cols` columns of them when Masked (Note [Edge
// micro-tiles]): R * V zmm accumulators (6 x 48: 18, plus three B vectors and the broadcast,
// 22 of 32 registers). Wider tiles load fewer B vectors per FMA but need more columns to
// fill; the tunable micro_n picks one per shape. A is packed (R = 2 * kMicroRows: two
// slivers, Note [Micro-tiles of two slivers]), or with RowA R rows of a row-major matrix lda
// apart (MicroKernelRowA).
// With Set, C = alpha * A @ B + C0 (zeros where c0 is null; MicroKernelSet) and C is not read.
template <int R, int V, bool Masked, bool RowA = false, bool Set = false>
inline void micro_tile(std::int64_t kc, const float* a, const float* b, float* c,
                       std::int64_t ldc, float alpha, std::int64_t cols, std::int64_t lda = 0,
                       const float* c0 = nullptr, std::int64_t ldc0 = 0) {
  constexpr int kWidth = 16 * V;
  // The C tile's rows are far apart and were last touched a K block ago: fetch them while
  // the K loop runs (every line of a row, aligned or not). With Set, C0's rows instead (where
  // there is a C0).
  const float* first = Set ? c0 : c;
  const std::int64_t stride = Set ? ldc0 : ldc;
  for (int r = 0; r < R && first != nullptr; ++r) {
    for (int v = 0; v < V; ++v) {
      _mm_prefetch(reinterpret_cast<const char*>(first + r * stride + 16 * v), _MM_HINT_T0);
    }
    _mm_prefetch(reinterpret_cast<const char*>(first + r * stride + kWidth - 1), _MM_HINT_T0);
  }
  __m512 acc[R][V];
  for (auto& row : acc) {
    for (auto& x : row) x = _mm512_setzero_ps();
  }
  static_assert(RowA || R <= 2 * kMicroRows, "a packed A tile spans at most two slivers");
  // Row r of a packed A: the first sliver's, or past kMicroRows the second's (kc k-steps on).
  const float* second = a + kMicroRows * kc;
  for (std::int64_t k = 0; k < kc; ++k) {
    __m512 bv[V];
    for (int v = 0; v < V; ++v) bv[v] = _mm512_loadu_ps(b + 16 * v);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const float x = RowA ? a[r * lda] : r < kMicroRows ? a[r] : second[r - kMicroRows];
      const __m512 ar = _mm512_set1_ps(x);
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(ar, bv[v], acc[r][v]);
    }
    a += RowA ? 1 : kMicroRows;
    second += kMicroRows;
    b += kWidth;
  }
  const __m512 va = _mm512_set1_ps(alpha);
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    float* row = c + r * ldc;
    for (int v = 0; v < V; ++v) {
      if constexpr (Masked) {
        const __mmask16 m = lanes(cols - 16 * v);
        const __m512 old = _mm512_maskz_loadu_ps(m, row + 16 * v);
        _mm512_mask_storeu_ps(row + 16 * v, m, _mm512_fmadd_ps(va, acc[r][v], old));
      } else if constexpr (Set) {
        const __m512 start =
            c0 == nullptr ? _mm512_setzero_ps() : _mm512_loadu_ps(c0 + r * ldc0 + 16 * v);
        _mm512_storeu_ps(row + 16 * v, _mm512_fmadd_ps(va, acc[r][v], start));
      } else {
        _mm512_storeu_ps(row + 16 * v,
                         _mm512_fmadd_ps(va, acc[r][v], _mm512_loadu_ps(row + 16 * v)));
      }
    }
  }
}

template <int V>
void micro_6xv(std::int64_t kc, const float* a, const float* b, float* c, std::int64_t ldc,
               float alpha) {
  micro_tile<kMicroRows, V, false>(kc, a, b, c, ldc, alpha, 16 * V);
}

template <int V>
void micro_6xv_row_a(std::int64_t kc, const float* a, std::int64_t lda, const float* b, float* c,
                     std::int64_t ldc, float alpha) {
  micro_tile<kMicroRows, V, false, true>(kc, a, b, c, ldc, alpha, 16 * V, lda);
}

template <int V>
void micro_6xv_set(std::int64_t kc, const float* a, const float* b, float* c, std::int64_t ldc,
                   float alpha, const float* c0, std::int64_t ldc0) {
  micro_tile<kMicroRows, V, false, false, true>(kc, a, b, c, ldc, alpha, 16 * V, 0, c0, ldc0);
}

template <int V>
void micro_pair(std::int64_t kc, const float* a, const float* b, float* c, std::int64_t ldc,
                float alpha) {
  micro_tile<2 * kMicroRows, V, false>(kc, a, b, c, ldc, alpha, 16 * V);
}

template <int V>
void micro_pair_set(std::int64_t kc, const float* a, const float* b, float* c, std::int64_t ldc,
                    float alpha, const float* c0, std::int64_t ldc0) {
  micro_tile<2 * kMicroRows, V, false, false, true>(kc, a, b, c, ldc, alpha, 16 * V, 0, c0,
                                                    ldc0);
}

template <int V>
void micro_edge(int rows, std::int64_t cols, std::int64_t kc, const float* a, const float* b,
                float* c, std::int64_t ldc, float alpha) {
  with_row_count(rows, [&](auto r) {
    micro_tile<decltype(r)::value, V, true>(kc, a, b, c, ldc, alpha, cols);
  });
}

// B's slivers with unit-stride rows, by groups of rows (Note [Packing B by rows]): nr / 16
// vector copies per row of a sliver; a partial sliver's masked loads read only its columns and
// fill the rest with zeros.
void pack_b_avx512(const float* src, std::int64_t s0, std::int64_t s1, std::int64_t k0,
                   std::int64_t kb, std::int64_t col0, std::int64_t cols, std::int64_t nr,
                   float* dst) {
  if (s0 == 1 && s1 != 1) {  // Note [Packing a transposed B]
    pack_b_transposed_avx2(src, s1, k0, kb, col0, cols, nr, dst);
    return;
  }
  if (s1 != 1 || nr % 16 != 0) {
    pack_b_generic(src, s0, s1, k0, kb, col0, cols, nr, dst);
    return;
  }
  for_each_b_row_group(kb, cols, nr, [&](std::int64_t s, std::int64_t k, std::int64_t count) {
    float* out = dst + s * nr * kb + k * nr;
    const float* in = src + (k0 + k) * s0 + col0 + s * nr;
    const std::int64_t width = std::min(nr, cols - s * nr);
    for (std::int64_t v = 0; v * 16 < nr; ++v) {
      const __mmask16 mask = lanes(width - v * 16);
      for (std::int64_t r = 0; r < count; ++r) {
        const __m512 row = _mm512_maskz_loadu_ps(mask, in + r * s0 + v * 16);
        _mm512_storeu_ps(out + r * nr + v * 16, row);
      }
    }
  });
}

template <int V>
MicroKernelInfo with_width() {
  MicroKernelInfo info{"avx512", 16 * V, &micro_6xv<V>, &micro_edge<V>, &micro_6xv_row_a<V>,
                       &pack_a_avx2, &pack_b_avx512, &skinny_columns_avx512, &skinny_dot_avx512,
                       &micro_6xv_set<V>, nullptr, nullptr};
  // Two slivers of 6 x 48 would take 36 accumulators (Note [Micro-tiles of two slivers]).
  if constexpr (2 * kMicroRows * V <= 24) {
    info.fn_pair = &micro_pair<V>;
    info.fn_set_pair = &micro_pair_set<V>;
  }
  return info;
}

}  // namespace

MicroKernelInfo micro_kernel_avx512(int cols) {
  switch (cols) {
    case 16: return with_width<1>();
    case 0:
    case 32: return with_width<2>();
    case 48: return with_width<3>();
    default:
      return {"avx512", cols,    nullptr, nullptr, nullptr, nullptr,
              nullptr,  nullptr, nullptr, nullptr, nullptr, nullptr};
  }
}

}  // namespace ka::kernels::detail
