// AVX2+FMA micro-kernel: 6 x 16 floats, 12 ymm accumulators, and its edge tiles. Compiled with
// -mavx2 -mfma and only called after the CPU was checked for both (see gemm_cpu_isa()).
#include "gemm_internal.hpp"

#include <ka/core/error.hpp>

#include <immintrin.h>

#include <algorithm>

namespace ka::kernels::detail {
namespace {

// The lanes of a vector of 8 columns that fall in a tile `n` columns wide from its start,
// as maskload/maskstore's mask.
inline __m256i lanes(std::int64_t n) {
  const auto clamped = static_cast<int>(std::clamp<std::int64_t>(n, 0, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(clamped), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// R x 16 floats of C, the first `cols` columns of them when Masked (Note [Edge micro-tiles]):
// 2R ymm accumulators. A is packed, or with RowA R rows of a row-major matrix lda apart
// (MicroKernelRowA).
// With Set, C = alpha * A @ B + C0 (zeros where c0 is null; MicroKernelSet) and C is not read.
template <int R, bool Masked, bool RowA = false, bool Set = false>
inline void micro_tile(std::int64_t kc, const float* a, const float* b, float* c,
                       std::int64_t ldc, float alpha, std::int64_t cols, std::int64_t lda = 0,
                       const float* c0 = nullptr, std::int64_t ldc0 = 0) {
  // The C tile's rows are far apart and were last touched a K block ago: fetch them while
  // the K loop runs (every line of a row, aligned or not). With Set, C0's rows instead (where
  // there is a C0).
  const float* first = Set ? c0 : c;
  const std::int64_t stride = Set ? ldc0 : ldc;
  for (int r = 0; r < R && first != nullptr; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(first + r * stride), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(first + r * stride + 15), _MM_HINT_T0);
  }
  __m256 acc[R][2];
  for (auto& row : acc) {
    row[0] = _mm256_setzero_ps();
    row[1] = _mm256_setzero_ps();
  }
  for (std::int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b);
    const __m256 b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 ar = _mm256_broadcast_ss(RowA ? a + r * lda : a + r);
      acc[r][0] = _mm256_fmadd_ps(ar, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(ar, b1, acc[r][1]);
    }
    a += RowA ? 1 : kMicroRows;
    b += 16;
  }
  const __m256 va = _mm256_set1_ps(alpha);
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    float* row = c + r * ldc;
    if constexpr (Masked) {
      const __m256i m0 = lanes(cols);
      const __m256i m1 = lanes(cols - 8);
      _mm256_maskstore_ps(row, m0, _mm256_fmadd_ps(va, acc[r][0], _mm256_maskload_ps(row, m0)));
      _mm256_maskstore_ps(row + 8, m1,
                          _mm256_fmadd_ps(va, acc[r][1], _mm256_maskload_ps(row + 8, m1)));
    } else if constexpr (Set) {
      const float* start = c0 == nullptr ? nullptr : c0 + r * ldc0;
      const __m256 s0 = start == nullptr ? _mm256_setzero_ps() : _mm256_loadu_ps(start);
      const __m256 s1 = start == nullptr ? _mm256_setzero_ps() : _mm256_loadu_ps(start + 8);
      _mm256_storeu_ps(row, _mm256_fmadd_ps(va, acc[r][0], s0));
      _mm256_storeu_ps(row + 8, _mm256_fmadd_ps(va, acc[r][1], s1));
    } else {
      _mm256_storeu_ps(row, _mm256_fmadd_ps(va, acc[r][0], _mm256_loadu_ps(row)));
      _mm256_storeu_ps(row + 8, _mm256_fmadd_ps(va, acc[r][1], _mm256_loadu_ps(row + 8)));
    }
  }
}

void micro_6x16(std::int64_t kc, const float* a, const float* b, float* c, std::int64_t ldc,
                float alpha) {
  micro_tile<kMicroRows, false>(kc, a, b, c, ldc, alpha, 16);
}

void micro_6x16_row_a(std::int64_t kc, const float* a, std::int64_t lda, const float* b,
                      float* c, std::int64_t ldc, float alpha) {
  micro_tile<kMicroRows, false, true>(kc, a, b, c, ldc, alpha, 16, lda);
}

void micro_6x16_set(std::int64_t kc, const float* a, const float* b, float* c, std::int64_t ldc,
                    float alpha, const float* c0, std::int64_t ldc0) {
  micro_tile<kMicroRows, false, false, true>(kc, a, b, c, ldc, alpha, 16, 0, c0, ldc0);
}

void micro_edge(int rows, std::int64_t cols, std::int64_t kc, const float* a, const float* b,
                float* c, std::int64_t ldc, float alpha) {
  with_row_count(rows, [&](auto r) {
    micro_tile<decltype(r)::value, true>(kc, a, b, c, ldc, alpha, cols);
  });
}

// r[j][i] = r[i][j] for an 8 x 8 block of floats held as 8 rows.
inline void transpose8x8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]);
  const __m256 t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]);
  const __m256 t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]);
  const __m256 t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]);
  const __m256 t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

}  // namespace

// Note [Packing A by transposes]
// The scalar packing of A (six row streams interleaved one float at a time) costs a few
// cycles per float, which shows in a large GEMM's time. With unit-stride rows, eight k of a
// sliver are one 8 x 8 transpose: the six rows (the last repeated into lanes 6 and 7)
// are loaded eight floats at a time, transposed, and each column stored as eight floats at
// its k's place. The two extra floats of a store land on the next k's first two rows, which
// the next store rewrites; after a sliver's last k they land on the next sliver's start
// (packed next) or, after the last sliver, in the kPackSlack floats every A buffer keeps.
void pack_a_avx2(const float* src, std::int64_t s0, std::int64_t s1, std::int64_t row0,
                 std::int64_t rows, std::int64_t k0, std::int64_t kb, float* dst) {
  if (s1 != 1) {
    pack_a_generic(src, s0, s1, row0, rows, k0, kb, dst);
    return;
  }
  constexpr std::int64_t mr = kMicroRows;
  for (std::int64_t s = 0; s * mr < rows; ++s) {
    float* out = dst + s * mr * kb;
    const std::int64_t live = std::min(mr, rows - s * mr);
    const float* in[8];
    for (std::int64_t r = 0; r < 8; ++r) {
      in[r] = src + (row0 + s * mr + std::min(r, live - 1)) * s0 + k0;
    }
    std::int64_t k = 0;
    for (; k + 8 <= kb; k += 8) {
      __m256 v[8];
      for (int r = 0; r < 8; ++r) v[r] = _mm256_loadu_ps(in[r] + k);
      transpose8x8(v);
      for (int j = 0; j < 8; ++j) _mm256_storeu_ps(out + (k + j) * mr, v[j]);
    }
    for (; k < kb; ++k) {
      for (std::int64_t r = 0; r < mr; ++r) out[k * mr + r] = in[r][k];
    }
  }
}

// Note [Packing a transposed B]
// nn.Linear's B is the transpose of its weight: each column of B is a contiguous row of W.
// A sliver wants nr values per k, so 8 columns at a time are loaded 8 k at a time (8 vectors
// along K) and transposed into 8 vectors along N, as pack_a_avx2 does for A's rows; columns
// past the edge are zero vectors before the transpose. The generic packing's gather (one
// float per load, a cache line per column for every k) made packing cost more than the
// arithmetic at 256 x 256.
void pack_b_transposed_avx2(const float* src, std::int64_t s1, std::int64_t k0, std::int64_t kb,
                            std::int64_t col0, std::int64_t cols, std::int64_t nr, float* dst) {
  KA_ASSERT(nr % 8 == 0, "pack_b_transposed_avx2: nr = ", nr);
  for (std::int64_t s = 0; s * nr < cols; ++s) {
    float* out = dst + s * nr * kb;
    const std::int64_t width = std::min(nr, cols - s * nr);
    for (std::int64_t g = 0; g * 8 < nr; ++g) {
      const std::int64_t live = std::clamp<std::int64_t>(width - g * 8, 0, 8);
      const std::int64_t last = std::max<std::int64_t>(live - 1, 0);
      const float* in[8];
      for (std::int64_t c = 0; c < 8; ++c) {
        in[c] = src + (col0 + s * nr + g * 8 + std::min(c, last)) * s1 + k0;
      }
      float* o = out + g * 8;
      std::int64_t k = 0;
      for (; k + 8 <= kb; k += 8) {
        __m256 v[8];
        for (int c = 0; c < 8; ++c) {
          v[c] = c < live ? _mm256_loadu_ps(in[c] + k) : _mm256_setzero_ps();
        }
        transpose8x8(v);
        for (int j = 0; j < 8; ++j) _mm256_storeu_ps(o + (k + j) * nr, v[j]);
      }
      for (; k < kb; ++k) {
        for (std::int64_t c = 0; c < 8; ++c) o[k * nr + c] = c < live ? in[c][k] : 0.0F;
      }
    }
  }
}

namespace {

// B's slivers with unit-stride rows, by groups of rows (Note [Packing B by rows]): nr / 8
// vector copies per row of a sliver; a partial sliver's masked loads read only its columns and
// fill the rest with zeros (the generic packing's std::copy + std::fill per k cost a call per
// 64 bytes).
void pack_b_avx2(const float* src, std::int64_t s0, std::int64_t s1, std::int64_t k0,
                 std::int64_t kb, std::int64_t col0, std::int64_t cols, std::int64_t nr,
                 float* dst) {
  if (s0 == 1 && s1 != 1 && nr % 8 == 0) {
    pack_b_transposed_avx2(src, s1, k0, kb, col0, cols, nr, dst);
    return;
  }
  if (s1 != 1 || nr % 8 != 0) {
    pack_b_generic(src, s0, s1, k0, kb, col0, cols, nr, dst);
    return;
  }
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for_each_b_row_group(kb, cols, nr, [&](std::int64_t s, std::int64_t k, std::int64_t count) {
    float* out = dst + s * nr * kb + k * nr;
    const float* in = src + (k0 + k) * s0 + col0 + s * nr;
    const std::int64_t width = std::min(nr, cols - s * nr);
    for (std::int64_t v = 0; v * 8 < nr; ++v) {
      const auto live = static_cast<int>(std::clamp<std::int64_t>(width - v * 8, 0, 8));
      float* o = out + v * 8;
      const float* i = in + v * 8;
      if (live == 8) {
        for (std::int64_t r = 0; r < count; ++r) {
          _mm256_storeu_ps(o + r * nr, _mm256_loadu_ps(i + r * s0));
        }
      } else {
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(live), index);
        for (std::int64_t r = 0; r < count; ++r) {
          _mm256_storeu_ps(o + r * nr, _mm256_maskload_ps(i + r * s0, mask));
        }
      }
    }
  });
}

}  // namespace

MicroKernelInfo micro_kernel_avx2(int cols) {
  if (cols != 0 && cols != 16) {
    return {"avx2",  cols,    nullptr, nullptr, nullptr, nullptr,
            nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
  }
  return {"avx2", 16, &micro_6x16, &micro_edge, &micro_6x16_row_a,
          &pack_a_avx2, &pack_b_avx2, &skinny_columns_avx2, &skinny_dot_avx2,
          &micro_6x16_set, nullptr, nullptr};  // Note [Micro-tiles of two slivers]
}

}  // namespace ka::kernels::detail
