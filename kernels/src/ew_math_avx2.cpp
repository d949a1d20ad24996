// AVX2 + FMA versions of the element-wise math that is bound by instruction count: exp and
// what is built on it (sigmoid, silu, both gelus, tanh) and softmax's exp-and-sum. Compiled
// with -mavx2 -mfma and only called when the active path is avx2 (active_cpu_path()). See
// Note [AVX2 exp].
#include "ew_math.hpp"

#include <immintrin.h>

#include <cmath>
#include <cstdint>

namespace ka::kernels::detail {
namespace {

// Note [AVX2 exp]
// The portable loops compiled for AVX2 run exp and sigmoid several times slower than the
// AVX-512 forms (Note [AVX-512 exp]): the compiler's vector code of exp_f32 keeps every
// select and range check. Here, as in the
// AVX-512 form: x is clamped to [kExpFlushBelow, 89] (min/max with x as the second operand
// keep NaN), n = round(x / ln2), r = x − n·ln2 in two steps, e^r the same six-FMA polynomial.
// AVX2 has no vscalefps, so 2^n is built in the exponent field, in two halves 2^h · 2^(n−h)
// so that every n of the clamped range is a normal float: the products overflow to inf above
// 88.72, lanes below kExpFlushBelow are zeroed rather than made subnormal (Note [No subnormal
// exp]), and NaN stays NaN (its product with anything is NaN).
inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_set1_ps(89.0F), x);
  // All ones where x is below the flush bound (false for NaN, which is kept).
  const __m256 flushed = _mm256_cmp_ps(x, _mm256_set1_ps(kExpFlushBelow), _CMP_LT_OQ);
  x = _mm256_max_ps(_mm256_set1_ps(kExpFlushBelow), x);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341F)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375F), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4F), r);
  __m256 p = _mm256_set1_ps(0.0013941108481958508F);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.00837512593716383F));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.04166635125875473F));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.16666415333747864F));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5F));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0F));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0F));
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i h = _mm256_srai_epi32(ni, 1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, h), bias), 23));
  return _mm256_andnot_ps(flushed, _mm256_mul_ps(_mm256_mul_ps(p, s1), s2));
}

// num / (1 + e^arg): sigmoid (num = 1, arg = −x), silu (num = x) and gelu's tanh form.
inline __m256 over_one_plus_exp(__m256 num, __m256 arg) {
  return _mm256_div_ps(num, _mm256_add_ps(_mm256_set1_ps(1.0F), exp8(arg)));
}

// erf_f32 in vectors: Eigen's rational function on [−4, 4], ±1 beyond (the clamp's min and max
// return x, their second operand, when it is NaN).
inline __m256 erf8(__m256 x) {
  const __m256 c = _mm256_min_ps(_mm256_set1_ps(4.0F), _mm256_max_ps(_mm256_set1_ps(-4.0F), x));
  const __m256 x2 = _mm256_mul_ps(c, c);
  __m256 p = _mm256_set1_ps(-2.72614225801306e-10F);
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.77068142495902e-08F));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-2.10102402082508e-06F));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-5.69250639462346e-05F));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-7.34990630326855e-04F));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-2.95459980854025e-03F));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1.60960333262415e-02F));
  __m256 q = _mm256_set1_ps(-1.45660718464996e-05F);
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-2.13374055278905e-04F));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-1.68282697438203e-03F));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-7.37332916720468e-03F));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-1.42647390514189e-02F));
  return _mm256_div_ps(_mm256_mul_ps(p, c), q);
}

// tanh_f32 in vectors (Cephes): an odd polynomial below |x| = 0.625, else
// 1 − 2/(e^(2|x|) + 1) with x's sign; NaN stays NaN (exp8 keeps it, and NaN < 0.625 is false).
inline __m256 tanh8(__m256 x) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0F);
  const __m256 ax = _mm256_andnot_ps(sign_bit, x);
  const __m256 e = exp8(_mm256_add_ps(ax, ax));
  const __m256 one = _mm256_set1_ps(1.0F);
  __m256 big = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0F), _mm256_add_ps(e, one)));
  big = _mm256_or_ps(big, _mm256_and_ps(x, sign_bit));
  const __m256 z = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(-5.70498872745E-3F);
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954E-2F));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531E-2F));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036E-1F));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422E-1F));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
  return _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(0.625F), _CMP_LT_OQ));
}

// Lanes [0, left) of a ymm set (left clamped to [0, 8]), for masked loads and stores.
inline __m256i lanes(std::int64_t left) {
  const auto n = static_cast<int>(left < 8 ? left : 8);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// d[i] = f(a[i]); d may be a (each vector is loaded before it is stored).
template <class F>
void map8(const float* a, float* d, std::int64_t n, F f) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, f(_mm256_loadu_ps(a + i)));
  if (i < n) {
    const __m256i m = lanes(n - i);
    _mm256_maskstore_ps(d + i, m, f(_mm256_maskload_ps(a + i, m)));
  }
}

}  // namespace

namespace {

// The instruction-bound unary ops as functions of a vector (false for the others).
template <class Body>
bool with_unary(EwOp op, Body body) {
  switch (op) {
    case EwOp::kExp:
      body([](__m256 x) { return exp8(x); });
      return true;
    case EwOp::kTanh:
      body([](__m256 x) { return tanh8(x); });
      return true;
    case EwOp::kGelu:  // 0.5·x·(1 + erf(x/√2))
      body([](__m256 x) {
        const __m256 half_x = _mm256_mul_ps(_mm256_set1_ps(0.5F), x);
        const __m256 e = erf8(_mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752F)));
        return _mm256_fmadd_ps(half_x, e, half_x);
      });
      return true;
    case EwOp::kSigmoid:
      body([](__m256 x) {
        return over_one_plus_exp(_mm256_set1_ps(1.0F), _mm256_sub_ps(_mm256_setzero_ps(), x));
      });
      return true;
    case EwOp::kSilu:
      body([](__m256 x) {
        return over_one_plus_exp(x, _mm256_sub_ps(_mm256_setzero_ps(), x));
      });
      return true;
    case EwOp::kGeluTanh:
      // 0.5·x·(1 + tanh(u)) = x / (1 + e^(−2u)), u = √(2/π)·(x + 0.044715·x³), the −2 folded
      // into the constants (as the AVX-512 form).
      body([](__m256 x) {
        const __m256 x2 = _mm256_mul_ps(x, x);
        const __m256 minus_2u = _mm256_mul_ps(
            x, _mm256_fmadd_ps(x2, _mm256_set1_ps(-2.0F * 0.044715F * 0.79788456080286536F),
                               _mm256_set1_ps(-2.0F * 0.79788456080286536F)));
        return over_one_plus_exp(x, minus_2u);
      });
      return true;
    default:
      return false;
  }
}

}  // namespace

bool unary_run_avx2(EwOp op, const float* __restrict a, float* __restrict d, std::int64_t n) {
  return with_unary(op, [&](auto f) { map8(a, d, n, f); });
}

bool unary_rows_inplace_avx2(EwOp op, float* c, std::int64_t ldc, std::int64_t rows,
                             std::int64_t cols) {
  const auto rows_map = [&](auto f) {
    for (std::int64_t r = 0; r < rows; ++r) map8(c + r * ldc, c + r * ldc, cols, f);
  };
  if (op == EwOp::kRelu) {  // max(0, x) returns x (the second operand) when x is NaN
    rows_map([](__m256 x) { return _mm256_max_ps(_mm256_setzero_ps(), x); });
    return true;
  }
  return with_unary(op, rows_map);
}

float exp_shifted_sum_avx2(const float* __restrict x, float shift, float* __restrict d,
                           std::int64_t n) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 e0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    const __m256 e1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), s));
    _mm256_storeu_ps(d + i, e0);
    _mm256_storeu_ps(d + i + 8, e1);
    acc0 = _mm256_add_ps(acc0, e0);
    acc1 = _mm256_add_ps(acc1, e1);
  }
  for (; i < n; i += 8) {
    const __m256i m = lanes(n - i);
    // Masked-off lanes load 0, whose exp is not 0: zero them before the sum.
    const __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), s)),
                                   _mm256_castsi256_ps(m));
    _mm256_maskstore_ps(d + i, m, e);
    acc0 = _mm256_add_ps(acc0, e);
  }
  const __m256 acc = _mm256_add_ps(acc0, acc1);
  __m128 v = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_movehdup_ps(v));
  return _mm_cvtss_f32(v);
}

void stream_store_avx2(float* __restrict dst, const float* __restrict src, std::int64_t n) {
  // Ordinary stores up to dst's first 64-byte line, then whole lines in two 32-byte streaming
  // stores (the write-combining buffer sends a full line without reading it).
  std::int64_t i = 0;
  while (i < n && (reinterpret_cast<std::uintptr_t>(dst + i) & 63U) != 0) {
    dst[i] = src[i];
    ++i;
  }
  for (; i + 16 <= n; i += 16) {
    _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
    _mm256_stream_ps(dst + i + 8, _mm256_loadu_ps(src + i + 8));
  }
  for (; i < n; ++i) dst[i] = src[i];
}

namespace {

// The max of x[0..n), NaN skipped (maxps returns its second operand, the accumulator, when the
// first is NaN); lanes past n count as -inf.
float row_max(const float* x, std::int64_t n) {
  const __m256 neg_inf = _mm256_set1_ps(-HUGE_VALF);
  __m256 m0 = neg_inf;
  __m256 m1 = neg_inf;
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
  }
  for (; i < n; i += 8) {
    const __m256i m = lanes(n - i);
    const __m256 v = _mm256_blendv_ps(neg_inf, _mm256_maskload_ps(x + i, m),
                                      _mm256_castsi256_ps(m));
    m0 = _mm256_max_ps(v, m0);
  }
  __m256 v8 = _mm256_max_ps(m0, m1);
  __m128 v = _mm_max_ps(_mm256_castps256_ps128(v8), _mm256_extractf128_ps(v8, 1));
  v = _mm_max_ps(v, _mm_movehl_ps(v, v));
  v = _mm_max_ss(v, _mm_movehdup_ps(v));
  return _mm_cvtss_f32(v);
}

}  // namespace

void online_softmax_rows_avx2(const float* s, std::int64_t lds, std::int64_t rows,
                              std::int64_t cols, float* p, std::int64_t ldp, float* m, float* l,
                              float* o, std::int64_t ldo, std::int64_t dv) {
  online_softmax_rows_with(s, lds, rows, cols, p, ldp, m, l, o, ldo, dv, row_max,
                           exp_shifted_sum_avx2, [](float* orow, float d, std::int64_t n) {
                             const __m256 c = exp8(_mm256_set1_ps(d));
                             map8(orow, orow, n, [c](__m256 x) { return _mm256_mul_ps(x, c); });
                             return _mm256_cvtss_f32(c);
                           });
}

}  // namespace ka::kernels::detail
