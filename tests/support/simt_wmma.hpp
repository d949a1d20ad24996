// The part of CUDA's nvcuda::wmma API that ka's tensor-core kernels use, for host compilers
// (Note [SIMT on the host]; include after simt_host.hpp). A warp's fragment is opaque on a
// GPU (each lane holds some of its elements); here every emulated thread holds the whole
// tile, and each warp-wide operation is done by every lane on its own copy: the same results,
// redundantly. Products of bf16 values are exact in float and summed in float, as on tensor
// cores (the order of the sums may differ: compare with a tolerance). Supported: 16x16x16
// tiles, __nv_bfloat16 or half A and B (row or column major), float accumulators.
#pragma once

#if defined(__CUDACC__)
#error "simt_wmma.hpp is for host compilers; nvcc has <mma.h>"
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

namespace detail {
// load/store_matrix_sync's pointer must be 256-bit aligned on a GPU.
inline void check_aligned(const void* p) {
  if (reinterpret_cast<std::uintptr_t>(p) % 32 != 0) {
    std::fprintf(stderr, "simt_wmma: a matrix load or store at %p is not 32-byte aligned\n", p);
    std::abort();
  }
}
inline float to_float(float v) { return v; }
inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
inline float to_float(__half v) { return __half2float(v); }

template <class Use, int M, int N, int K>
struct Extent;
template <int M, int N, int K>
struct Extent<matrix_a, M, N, K> {
  static constexpr int rows = M, cols = K;
};
template <int M, int N, int K>
struct Extent<matrix_b, M, N, K> {
  static constexpr int rows = K, cols = N;
};
template <int M, int N, int K>
struct Extent<accumulator, M, N, K> {
  static constexpr int rows = M, cols = N;
};
}  // namespace detail

/// The whole rows x cols tile, row-major, in every emulated thread.
template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static constexpr int rows = detail::Extent<Use, M, N, K>::rows;
  static constexpr int cols = detail::Extent<Use, M, N, K>::cols;
  static constexpr int num_elements = rows * cols;
  T x[num_elements];
};

template <class Use, int M, int N, int K, class T, class Layout>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, T v) {
  for (T& e : f.x) e = v;
}

// A or B from memory with leading dimension ldm, in the fragment's layout.
template <class Use, int M, int N, int K, class T, class Layout>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const T* p, unsigned ldm) {
  using F = fragment<Use, M, N, K, T, Layout>;
  detail::check_aligned(p);
  for (int r = 0; r < F::rows; ++r) {
    for (int c = 0; c < F::cols; ++c) {
      const bool row = std::is_same_v<Layout, row_major>;
      f.x[r * F::cols + c] = p[row ? r * ldm + c : c * ldm + r];
    }
  }
}

// An accumulator from memory, in the layout given.
template <int M, int N, int K, class T>
void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const T* p, unsigned ldm,
                      layout_t layout) {
  detail::check_aligned(p);
  for (int r = 0; r < M; ++r) {
    for (int c = 0; c < N; ++c) {
      f.x[r * N + c] = p[layout == mem_row_major ? r * ldm + c : c * ldm + r];
    }
  }
}

template <int M, int N, int K, class T>
void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm,
                       layout_t layout) {
  detail::check_aligned(p);
  for (int r = 0; r < M; ++r) {
    for (int c = 0; c < N; ++c) {
      p[layout == mem_row_major ? r * ldm + c : c * ldm + r] = f.x[r * N + c];
    }
  }
}

// d = a @ b + c.
template <int M, int N, int K, class TA, class LA, class TB, class LB, class TC>
void mma_sync(fragment<accumulator, M, N, K, TC>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
              const fragment<matrix_b, M, N, K, TB, LB>& b,
              const fragment<accumulator, M, N, K, TC>& c) {
  TC out[M * N];
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      float acc = detail::to_float(c.x[i * N + j]);
      for (int k = 0; k < K; ++k) {
        acc += detail::to_float(a.x[i * K + k]) * detail::to_float(b.x[k * N + j]);
      }
      out[i * N + j] = acc;
    }
  }
  for (int e = 0; e < M * N; ++e) d.x[e] = out[e];
}

}  // namespace nvcuda::wmma
