// Portable micro-kernel: 6 x 16 floats in plain C++ (the compiler vectorises what the baseline
// ISA allows). The fallback on CPUs without AVX2.
#include "gemm_internal.hpp"
#include "gemm_skinny_dot.hpp"

#include <ka/core/ceil_div.hpp>

#include <algorithm>

namespace ka::kernels::detail {
namespace {

constexpr int kCols = 16;

void micro_6x16_portable(std::int64_t kc, const float* a, const float* b, float* c,
                         std::int64_t ldc, float alpha) {
  float acc[kMicroRows][kCols] = {};
  for (std::int64_t k = 0; k < kc; ++k) {
    for (int r = 0; r < kMicroRows; ++r) {
      const float ar = a[r];
      for (int j = 0; j < kCols; ++j) {
        acc[r][j] += ar * b[j];
      }
    }
    a += kMicroRows;
    b += kCols;
  }
  for (int r = 0; r < kMicroRows; ++r) {
    for (int j = 0; j < kCols; ++j) {
      c[r * ldc + j] += alpha * acc[r][j];
    }
  }
}

}  // namespace

void pack_a_generic(const float* src, std::int64_t s0, std::int64_t s1, std::int64_t row0,
                    std::int64_t rows, std::int64_t k0, std::int64_t kb, float* dst) {
  constexpr std::int64_t mr = kMicroRows;
  for (std::int64_t s = 0; s < ceil_div(rows, mr); ++s) {
    float* out = dst + s * mr * kb;
    const std::int64_t live = std::min(mr, rows - s * mr);
    const float* in[mr];
    for (std::int64_t r = 0; r < mr; ++r) {
      in[r] = src + (row0 + s * mr + std::min(r, live - 1)) * s0 + k0 * s1;
    }
    // k outer, rows inner: the stores are contiguous (the micro-kernel's order) and the six
    // row streams are read sequentially. Rows past the edge repeat the last row.
    for (std::int64_t k = 0; k < kb; ++k) {
      for (std::int64_t r = 0; r < mr; ++r) out[k * mr + r] = in[r][k * s1];
    }
  }
}

void pack_b_generic(const float* src, std::int64_t s0, std::int64_t s1, std::int64_t k0,
                    std::int64_t kb, std::int64_t col0, std::int64_t cols, std::int64_t nr,
                    float* dst) {
  for (std::int64_t s = 0; s < ceil_div(cols, nr); ++s) {
    float* out = dst + s * nr * kb;
    const std::int64_t width = std::min(nr, cols - s * nr);
    for (std::int64_t k = 0; k < kb; ++k) {
      const float* in = src + (k0 + k) * s0 + (col0 + s * nr) * s1;
      float* o = out + k * nr;
      if (s1 == 1) {
        std::copy(in, in + width, o);
      } else {
        for (std::int64_t j = 0; j < width; ++j) o[j] = in[j * s1];
      }
      std::fill(o + width, o + nr, 0.0F);
    }
  }
}

// The portable skinny path: each row of A over a strip of kStrip columns of the pass's rows of
// B (Note [Skinny rows in one pass]); the strip (kSkinnyRowsPerPass x kStrip floats) stays in
// L1 while the rows take their turns, so B is read from memory once.
void skinny_columns_generic(const SkinnyArgs& s, std::int64_t col_begin, std::int64_t col_end) {
  constexpr std::int64_t kStrip = 64;
  const auto strips = [&](const float* ap, std::int64_t kb, const float* b,
                          const float* /*next*/) {
    for (std::int64_t j = col_begin; j < col_end; j += kStrip) {
      const std::int64_t w = std::min(kStrip, col_end - j);
      for (std::int64_t r = 0; r < s.m; ++r) {
        float acc[kStrip] = {};
        for (std::int64_t k = 0; k < kb; ++k) {
          const float ar = ap[k * s.m + r];
          const float* brow = b + k * s.ldb + j;
          for (std::int64_t q = 0; q < w; ++q) acc[q] += ar * brow[q];
        }
        float* c = s.c + r * s.ldc + (j - col_begin);
        for (std::int64_t q = 0; q < w; ++q) c[q] += s.alpha * acc[q];
      }
    }
  };
  for_each_skinny_pass<kSkinnyRowsPerPass>(s, strips);
}

namespace {

// The vector type of skinny_dot_columns: 8 floats in plain C++, which the compiler maps to
// what the baseline ISA has.
struct PortableFloats {
  static constexpr int kWidth = 8;
  struct T {
    float v[kWidth];
  };
  static T zero() { return T{}; }
  static T load(const float* p) {
    T t;
    std::copy(p, p + kWidth, t.v);
    return t;
  }
  static T load_first(const float* p, int n) {
    T t{};
    std::copy(p, p + n, t.v);
    return t;
  }
  static T fma(const T& a, const T& b, T c) {
    for (int i = 0; i < kWidth; ++i) c.v[i] += a.v[i] * b.v[i];
    return c;
  }
  static float sum(const T& t) {
    float s = 0.0F;
    for (float x : t.v) s += x;
    return s;
  }
};

}  // namespace

void skinny_dot_generic(const SkinnyArgs& s, std::int64_t col_begin, std::int64_t col_end) {
  skinny_dot_columns<PortableFloats, 4, 4>(s, col_begin, col_end);
}

MicroKernelInfo micro_kernel_generic(int cols) {
  if (cols != 0 && cols != kCols) {
    return {"generic", cols, nullptr, nullptr, nullptr, nullptr,
            nullptr,  nullptr, nullptr, nullptr, nullptr, nullptr};
  }
  return {"generic", kCols, &micro_6x16_portable, nullptr, nullptr,
          &pack_a_generic, &pack_b_generic, &skinny_columns_generic, &skinny_dot_generic,
          nullptr, nullptr, nullptr};
}

}  // namespace ka::kernels::detail
