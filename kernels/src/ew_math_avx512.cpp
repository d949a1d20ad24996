// AVX-512 versions of the element-wise math whose portable loops are bound by instruction
// count rather than memory: exp and what is built on it (sigmoid, silu, gelu's tanh form, and
// softmax's exp-and-sum). Compiled with -mavx512f and only called when the CPU kernels' AVX-512
// paths are active (detail::avx512_active()). See Note [AVX-512 exp].
#include "ew_math.hpp"

// GCC 12 reports the _mm512_undefined_ps() inside the unmasked forms of min/max/roundscale
// (and the extracts of _mm512_reduce_add_ps) as "may be used uninitialized" once they are
// inlined; the value is never read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace ka::kernels::detail {
namespace {

// The first min(left, 16) lanes (left >= 1).
inline __mmask16 tail_mask(std::int64_t left) {
  return static_cast<__mmask16>((1U << (left < 16 ? left : 16)) - 1U);
}

// VZEROUPPER on the way out of an entry point (Note [Clean upper state on return]). Its
// destructor runs after the return value is computed, so the call it guards is never a tail
// call that leaves the state dirty.
struct CleanUpperOnReturn {
  CleanUpperOnReturn() = default;
  CleanUpperOnReturn(const CleanUpperOnReturn&) = delete;
  CleanUpperOnReturn& operator=(const CleanUpperOnReturn&) = delete;
  ~CleanUpperOnReturn() { _mm256_zeroupper(); }
};

// Elements of d (at most n) before its first 64-byte line: what a streamed output writes
// with ordinary stores so that its streaming stores are whole, aligned lines.
inline std::int64_t stream_head(const float* d, std::int64_t n) {
  const auto mis = static_cast<std::int64_t>((reinterpret_cast<std::uintptr_t>(d) & 63U) / 4U);
  return mis == 0 ? 0 : std::min<std::int64_t>(16 - mis, n);
}

// Note [AVX-512 exp]
// The portable exp_f32 (Note [Vectorizable exp]) spends about half its instructions building
// 2^n by hand and on selects for the range ends and NaN. AVX-512's vscalefps does both: it
// multiplies by 2^n for any n, overflowing to inf, and passes NaN through. What remains is
// Cephes' reduction: clamp x to [kExpFlushBelow, 89] (keeps n finite and the result normal;
// min/max with x as the second operand keep NaN), n = round(x / ln2), r = x − n·ln2 in two
// steps, then e^r, scalef(e^r, n) with the lanes below kExpFlushBelow zeroed (Note [No
// subnormal exp]): about three times fewer instructions.
// e^r is a degree-6 polynomial in Horner form, six FMAs, its coefficients a Chebyshev fit of
// e^r on [−ln2/2, ln2/2] (mpmath's chebyfit, rounded to float; the r and 1 terms come out as
// exactly 1). Cephes' form (1 + r + r²·P5(r)) takes eight instructions for the same accuracy;
// the test holds the whole exp to 2 ulp over [−87, 88].
// `nonpositive`: x is known to be <= 0 or NaN (softmax's x − max), so the upper clamp goes.
template <bool nonpositive = false>
inline __m512 exp16(__m512 x) {
  if (!nonpositive) x = _mm512_min_ps(_mm512_set1_ps(89.0F), x);
  // Not below the flush bound (NaN compares "not less": kept).
  const __mmask16 kept = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpFlushBelow), _CMP_NLT_UQ);
  x = _mm512_max_ps(_mm512_set1_ps(kExpFlushBelow), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341F)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375F), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4F), r);
  __m512 p = _mm512_set1_ps(0.0013941108481958508F);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.00837512593716383F));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.04166635125875473F));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.16666415333747864F));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5F));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0F));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0F));
  return _mm512_maskz_scalef_ps(kept, p, n);
}

// num / (1 + e^arg): sigmoid (num = 1, arg = −x), silu (num = x) and gelu's tanh form.
// (No vector constants at namespace scope: their initializers would run AVX-512 instructions
// when the program loads, on any CPU.) A true division: vrcp14ps and a Newton step in its
// place were slower.
inline __m512 over_one_plus_exp(__m512 num, __m512 arg) {
  return _mm512_div_ps(num, _mm512_add_ps(_mm512_set1_ps(1.0F), exp16(arg)));
}

// erf_f32 in vectors: Eigen's rational function on [−4, 4], ±1 beyond (the clamp's min and max
// return x, their second operand, when it is NaN).
inline __m512 erf16(__m512 x) {
  const __m512 c = _mm512_min_ps(_mm512_set1_ps(4.0F), _mm512_max_ps(_mm512_set1_ps(-4.0F), x));
  const __m512 x2 = _mm512_mul_ps(c, c);
  __m512 p = _mm512_set1_ps(-2.72614225801306e-10F);
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(2.77068142495902e-08F));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-2.10102402082508e-06F));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-5.69250639462346e-05F));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-7.34990630326855e-04F));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-2.95459980854025e-03F));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-1.60960333262415e-02F));
  __m512 q = _mm512_set1_ps(-1.45660718464996e-05F);
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-2.13374055278905e-04F));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-1.68282697438203e-03F));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-7.37332916720468e-03F));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-1.42647390514189e-02F));
  return _mm512_div_ps(_mm512_mul_ps(p, c), q);
}

// tanh_f32 in vectors (Cephes): an odd polynomial below |x| = 0.625, else
// 1 − 2/(e^(2|x|) + 1) with x's sign; NaN stays NaN (exp16 keeps it).
inline __m512 tanh16(__m512 x) {
  const __m512 ax = _mm512_abs_ps(x);
  const __m512 e = exp16(_mm512_add_ps(ax, ax));
  const __m512 one = _mm512_set1_ps(1.0F);
  __m512 big = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0F), _mm512_add_ps(e, one)));
  // x's sign bit onto big (>= 0); integer ops: AVX-512F has no float and/or.
  const __m512i sign = _mm512_and_epi32(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN));
  big = _mm512_castsi512_ps(_mm512_or_epi32(_mm512_castps_si512(big), sign));
  const __m512 z = _mm512_mul_ps(x, x);
  __m512 p = _mm512_set1_ps(-5.70498872745E-3F);
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(2.06390887954E-2F));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-5.37397155531E-2F));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(1.33314422036E-1F));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-3.33332819422E-1F));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, z), x, x);
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.625F), _CMP_LT_OQ), big,
                              small);
}

// d[i] = f(a[i]); d may be a (each vector is loaded before it is stored).
template <class F>
void map16(const float* a, float* d, std::int64_t n, F f) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d + i, f(_mm512_loadu_ps(a + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(d + i, m, f(_mm512_maskz_loadu_ps(m, a + i)));
  }
}

}  // namespace

namespace {

// The AVX-512 unary ops, as functions of one vector: what unary_run_avx512 maps into d and
// unary_stream_avx512 streams out. Returns false for the ops it has no vector form of. tanh
// and the erf gelu are the portable functions' formulas in vectors, so that they too are
// computed and stored in one pass rather than through the chunk path and its buffer.
template <class Body>
bool with_unary(EwOp op, Body body) {
  switch (op) {
    case EwOp::kExp:
      body([](__m512 x) { return exp16(x); });
      return true;
    case EwOp::kTanh:
      body([](__m512 x) { return tanh16(x); });
      return true;
    case EwOp::kGelu:  // 0.5·x·(1 + erf(x/√2))
      body([](__m512 x) {
        const __m512 half_x = _mm512_mul_ps(_mm512_set1_ps(0.5F), x);
        const __m512 e = erf16(_mm512_mul_ps(x, _mm512_set1_ps(0.70710678118654752F)));
        return _mm512_fmadd_ps(half_x, e, half_x);
      });
      return true;
    case EwOp::kSigmoid:
      body([](__m512 x) {
        return over_one_plus_exp(_mm512_set1_ps(1.0F), _mm512_sub_ps(_mm512_setzero_ps(), x));
      });
      return true;
    case EwOp::kSilu:
      body([](__m512 x) { return over_one_plus_exp(x, _mm512_sub_ps(_mm512_setzero_ps(), x)); });
      return true;
    case EwOp::kGeluTanh:
      // 0.5·x·(1 + tanh(u)) = x / (1 + e^(−2u)), u = √(2/π)·(x + 0.044715·x³).
      // −2u = x · (−2·√(2/π)·0.044715 · x² − 2·√(2/π)): the −2 folded into the constants.
      body([](__m512 x) {
        const __m512 x2 = _mm512_mul_ps(x, x);
        const __m512 minus_2u = _mm512_mul_ps(
            x, _mm512_fmadd_ps(x2, _mm512_set1_ps(-2.0F * 0.044715F * 0.79788456080286536F),
                               _mm512_set1_ps(-2.0F * 0.79788456080286536F)));
        return over_one_plus_exp(x, minus_2u);
      });
      return true;
    default:
      return false;
  }
}

}  // namespace

namespace {

// Every unary op with an AVX-512 form: with_unary's and the light ones.
template <class Body>
bool with_any_unary(EwOp op, Body body) {
  switch (op) {
    case EwOp::kRelu:  // max(0, x) returns x when x is NaN (the second operand), and -0 for -0
      body([](__m512 x) { return _mm512_max_ps(_mm512_setzero_ps(), x); });
      return true;
    case EwOp::kNeg:
      body([](__m512 x) { return _mm512_sub_ps(_mm512_set1_ps(-0.0F), x); });
      return true;
    default:
      return with_unary(op, body);
  }
}

// The binary ops as functions of two vectors.
template <class Body>
bool with_binary(EwOp op, Body body) {
  switch (op) {
    case EwOp::kAdd:
      body([](__m512 x, __m512 y) { return _mm512_add_ps(x, y); });
      return true;
    case EwOp::kSub:
      body([](__m512 x, __m512 y) { return _mm512_sub_ps(x, y); });
      return true;
    case EwOp::kMul:
      body([](__m512 x, __m512 y) { return _mm512_mul_ps(x, y); });
      return true;
    case EwOp::kDiv:
      body([](__m512 x, __m512 y) { return _mm512_div_ps(x, y); });
      return true;
    case EwOp::kMax:
      // max_f32: x when x is NaN, else vmaxps (y when y is NaN or x <= y), as ATen.
      body([](__m512 x, __m512 y) {
        return _mm512_mask_mov_ps(_mm512_max_ps(x, y), _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q),
                                  x);
      });
      return true;
    default:
      return false;
  }
}

}  // namespace

bool unary_run_avx512(EwOp op, const float* __restrict a, float* __restrict d, std::int64_t n) {
  return with_unary(op, [&](auto f) { map16(a, d, n, f); });
}

bool unary_rows_inplace_avx512(EwOp op, float* c, std::int64_t ldc, std::int64_t rows,
                               std::int64_t cols) {
  return with_any_unary(op, [&](auto f) {
    for (std::int64_t r = 0; r < rows; ++r) map16(c + r * ldc, c + r * ldc, cols, f);
  });
}

namespace {

// Another row's finished exponentials streamed out while a row's exps are computed: dst[i] =
// src[i] · inv with 64-byte streaming stores (dst 64-byte aligned, whole vectors).
struct Drain {
  const float* src;
  float* dst;
  __m512 inv;
  void at(std::int64_t i) const {
    _mm512_stream_ps(dst + i, _mm512_mul_ps(_mm512_loadu_ps(src + i), inv));
  }
};

// Prefetches the line of next.x + i (next.x not null) into the cache next.to names.
inline void prefetch_next(const NextRow& next, std::int64_t i) {
  const char* line = reinterpret_cast<const char*>(next.x + i);
  if (next.to == RowPrefetch::kL2) {
    _mm_prefetch(line, _MM_HINT_T2);
  } else {
    _mm_prefetch(line, _MM_HINT_T0);
  }
}

// d[i] = e^(x[i] − s) for i in [0, n) (d may be x: each vector is loaded before it is stored),
// returned summed (two vector accumulators); prefetches next.x[0..n) along the way where
// given, and drains [0, n) of `drain` (n a multiple of 16) where given.
float exp_store_sum(const float* x, __m512 s, float* d, std::int64_t n, NextRow next,
                    const Drain* drain = nullptr) {
  __m512 acc0 = _mm512_setzero_ps();
  __m512 acc1 = _mm512_setzero_ps();
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    if (next.x != nullptr) {
      prefetch_next(next, i);
      prefetch_next(next, i + 16);
    }
    if (drain != nullptr) {
      drain->at(i);
      drain->at(i + 16);
    }
    const __m512 v0 = exp16<true>(_mm512_sub_ps(_mm512_loadu_ps(x + i), s));
    const __m512 v1 = exp16<true>(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), s));
    _mm512_storeu_ps(d + i, v0);
    _mm512_storeu_ps(d + i + 16, v1);
    acc0 = _mm512_add_ps(acc0, v0);
    acc1 = _mm512_add_ps(acc1, v1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    if (drain != nullptr) drain->at(i);
    const __m512 v = exp16<true>(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), s));
    _mm512_mask_storeu_ps(d + i, m, v);
    acc0 = _mm512_mask_add_ps(acc0, m, acc0, v);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

}  // namespace

float exp_shifted_sum_avx512(const float* __restrict x, float shift, float* __restrict d,
                             std::int64_t n) {
  const CleanUpperOnReturn clean;
  return exp_store_sum(x, _mm512_set1_ps(shift), d, n, {});
}

namespace {

// Row sums accumulate in float over blocks of this many elements (4 vector accumulators, so
// each lane adds n/64 values) and in double across blocks: the row kernels' results then match
// ATen's to ~1e-6 for any row length, at the speed of a float loop.
constexpr std::int64_t kSumBlock = 2048;

// Sum of f(x[i]) over [0, n), f applied to vectors (zeros past n are never passed to f: masked
// lanes are dropped from the sum).
template <class F>
double row_sum(const float* x, std::int64_t n, F f) {
  double total = 0.0;
  for (std::int64_t b = 0; b < n; b += kSumBlock) {
    const std::int64_t e = b + kSumBlock < n ? b + kSumBlock : n;
    __m512 a0 = _mm512_setzero_ps();
    __m512 a1 = _mm512_setzero_ps();
    __m512 a2 = _mm512_setzero_ps();
    __m512 a3 = _mm512_setzero_ps();
    std::int64_t i = b;
    for (; i + 64 <= e; i += 64) {
      a0 = _mm512_add_ps(a0, f(_mm512_loadu_ps(x + i)));
      a1 = _mm512_add_ps(a1, f(_mm512_loadu_ps(x + i + 16)));
      a2 = _mm512_add_ps(a2, f(_mm512_loadu_ps(x + i + 32)));
      a3 = _mm512_add_ps(a3, f(_mm512_loadu_ps(x + i + 48)));
    }
    for (; i < e; i += 16) {
      const __mmask16 m = tail_mask(e - i);
      a0 = _mm512_mask_add_ps(a0, m, a0, f(_mm512_maskz_loadu_ps(m, x + i)));
    }
    total += static_cast<double>(
        _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3))));
  }
  return total;
}

// Stores v at d (64-byte aligned when `stream`) with a streaming or an ordinary store.
inline void store16(float* d, __m512 v, bool stream) {
  if (stream) {
    _mm512_stream_ps(d, v);
  } else {
    _mm512_storeu_ps(d, v);
  }
}

// d[i] = f(i, x-vector at i) for i in [0, n): streamed through 64-byte stores when `stream`
// (ordinary stores up to d's first 64-byte boundary and for the tail), else ordinary stores.
// f reads its own operands at i; d may be x itself (each vector is loaded before it is stored).
template <class F>
void row_map(float* d, std::int64_t n, bool stream, F f) {
  std::int64_t i = 0;
  if (stream) {
    const std::int64_t head = stream_head(d, n);
    if (head > 0) {
      const __mmask16 m = tail_mask(head);
      _mm512_mask_storeu_ps(d, m, f(std::int64_t{0}, m));
      i = head;
    }
  }
  for (; i + 16 <= n; i += 16) store16(d + i, f(i, static_cast<__mmask16>(0xFFFF)), stream);
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(d + i, m, f(i, m));
  }
}

}  // namespace

void stream_store_avx512(float* __restrict dst, const float* __restrict src, std::int64_t n) {
  // Whole 64-byte lines per store: the write-combining buffers then never hold a partial
  // line, as they do between 16-byte SSE streaming stores.
  row_map(dst, n, true,
          [src](std::int64_t i, __mmask16 m) { return _mm512_maskz_loadu_ps(m, src + i); });
}

namespace {

// rows_sum_avx512 for a fixed number of rows, R side by side: two vector accumulators each.
template <int R>
void rows_sum(const float* const* x, std::int64_t n, double* sums) {
  for (int r = 0; r < R; ++r) sums[r] = 0.0;
  for (std::int64_t b = 0; b < n; b += kSumBlock) {
    const std::int64_t e = b + kSumBlock < n ? b + kSumBlock : n;
    __m512 a[R][2];
    for (int r = 0; r < R; ++r) a[r][0] = a[r][1] = _mm512_setzero_ps();
    std::int64_t i = b;
    for (; i + 32 <= e; i += 32) {
      for (int r = 0; r < R; ++r) {
        a[r][0] = _mm512_add_ps(a[r][0], _mm512_loadu_ps(x[r] + i));
        a[r][1] = _mm512_add_ps(a[r][1], _mm512_loadu_ps(x[r] + i + 16));
      }
    }
    for (; i < e; i += 16) {
      const __mmask16 m = tail_mask(e - i);
      for (int r = 0; r < R; ++r) {
        a[r][0] = _mm512_mask_add_ps(a[r][0], m, a[r][0], _mm512_maskz_loadu_ps(m, x[r] + i));
      }
    }
    for (int r = 0; r < R; ++r) {
      sums[r] += static_cast<double>(_mm512_reduce_add_ps(_mm512_add_ps(a[r][0], a[r][1])));
    }
  }
}

}  // namespace

double run_sum_avx512(const float* x, std::int64_t n) {
  double sums[4];
  if (n < 4 * kSumBlock) {
    rows_sum<1>(&x, n, sums);
    return sums[0];
  }
  const std::int64_t q = n / 4 / 16 * 16;
  const float* parts[4] = {x, x + q, x + 2 * q, x + 3 * q};
  rows_sum<4>(parts, q, sums);
  double total = (sums[0] + sums[1]) + (sums[2] + sums[3]);
  if (4 * q < n) {
    const float* tail = x + 4 * q;
    rows_sum<1>(&tail, n - 4 * q, sums);
    total += sums[0];
  }
  return total;
}

void rows_sum_avx512(const float* const* x, int count, std::int64_t n, double* sums) {
  switch (count) {
    case 1:
      rows_sum<1>(x, n, sums);
      break;
    case 2:
      rows_sum<2>(x, n, sums);
      break;
    case 3:
      rows_sum<3>(x, n, sums);
      break;
    default:
      rows_sum<4>(x, n, sums);
      break;
  }
}

void layer_norm_row_avx512(const float* x, const float* w, const float* b, float* out,
                           std::int64_t n, float eps, bool stream, NextRow next) {
  const double mean_d = row_sum(x, n, [](__m512 v) { return v; }) / static_cast<double>(n);
  const auto mean = static_cast<float>(mean_d);
  const __m512 mv = _mm512_set1_ps(mean);
  const double sq = row_sum(x, n, [mv](__m512 v) {
    const __m512 c = _mm512_sub_ps(v, mv);
    return _mm512_mul_ps(c, c);
  });
  const __m512 rv = _mm512_set1_ps(
      static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(n) + static_cast<double>(eps))));
  const __m512 one = _mm512_set1_ps(1.0F);
  const __m512 zero = _mm512_setzero_ps();
  row_map(out, n, stream, [&](std::int64_t i, __mmask16 m) {
    if (next.x != nullptr) prefetch_next(next, i);
    const __m512 c = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), mv), rv);
    const __m512 wv = w != nullptr ? _mm512_maskz_loadu_ps(m, w + i) : one;
    const __m512 bv = b != nullptr ? _mm512_maskz_loadu_ps(m, b + i) : zero;
    return _mm512_fmadd_ps(c, wv, bv);
  });
}

namespace {

// The max of x[0..n) (NaN skipped: max_ps returns its second operand, the accumulator, when the
// first is NaN; a NaN still reaches the sum through its exp, so the row is NaN as in ATen).
float row_max(const float* x, std::int64_t n) {
  __m512 m0 = _mm512_set1_ps(-HUGE_VALF);
  __m512 m1 = m0;
  __m512 m2 = m0;
  __m512 m3 = m0;
  std::int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    m0 = _mm512_max_ps(_mm512_loadu_ps(x + i), m0);
    m1 = _mm512_max_ps(_mm512_loadu_ps(x + i + 16), m1);
    m2 = _mm512_max_ps(_mm512_loadu_ps(x + i + 32), m2);
    m3 = _mm512_max_ps(_mm512_loadu_ps(x + i + 48), m3);
  }
  for (; i < n; i += 16) {
    const __mmask16 k = tail_mask(n - i);
    m0 = _mm512_mask_max_ps(m0, k, _mm512_maskz_loadu_ps(k, x + i), m0);
  }
  return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
}

// e = exp(x − max(x)) for a row, summed in float per kSumBlock and in double across; an all
// −inf row gives exp(NaN) = NaN everywhere, as ATen. Prefetches `next` and drains `drain`
// (over the same n elements) along the way where given.
double row_exp_sum(const float* x, float* e, std::int64_t n, NextRow next,
                   const Drain* drain) {
  const __m512 s = _mm512_set1_ps(row_max(x, n));
  double sum = 0.0;
  for (std::int64_t b = 0; b < n; b += kSumBlock) {
    const std::int64_t len = b + kSumBlock < n ? kSumBlock : n - b;
    Drain part{};
    if (drain != nullptr) part = {drain->src + b, drain->dst + b, drain->inv};
    sum += static_cast<double>(exp_store_sum(x + b, s, e + b, len,
                                             {next.x != nullptr ? next.x + b : nullptr, next.to},
                                             drain != nullptr ? &part : nullptr));
  }
  return sum;
}

// out = e · inv, streamed or in place.
void scale_row(const float* e, float inv, float* out, std::int64_t n, bool stream) {
  const __m512 v = _mm512_set1_ps(inv);
  row_map(out, n, stream, [&](std::int64_t j, __mmask16 k) {
    return _mm512_mul_ps(_mm512_maskz_loadu_ps(k, e + j), v);
  });
}

}  // namespace

void online_softmax_rows_avx512(const float* s, std::int64_t lds, std::int64_t rows,
                                std::int64_t cols, float* p, std::int64_t ldp, float* m, float* l,
                                float* o, std::int64_t ldo, std::int64_t dv) {
  const CleanUpperOnReturn clean;
  online_softmax_rows_with(
      s, lds, rows, cols, p, ldp, m, l, o, ldo, dv, row_max,
      [](const float* x, float shift, float* e, std::int64_t n) {
        return exp_store_sum(x, _mm512_set1_ps(shift), e, n, {});
      },
      [](float* orow, float d, std::int64_t n) {
        const __m512 c = exp16<true>(_mm512_set1_ps(d));
        map16(orow, orow, n, [c](__m512 x) { return _mm512_mul_ps(x, c); });
        return _mm512_cvtss_f32(c);
      });
}

void softmax_row_avx512(const float* x, float* out, std::int64_t n, NextRow next) {
  const double sum = row_exp_sum(x, out, n, next, nullptr);
  scale_row(out, static_cast<float>(1.0 / sum), out, n, false);
}

// Note [Pipelined softmax]
// A streamed softmax keeps a row's exponentials in a buffer and streams them out scaled once
// the sum is known. Done as a third pass, the row's 16 KiB of streaming stores come in one
// burst that the core waits on; instead the stores of row r − 1 are spread over row r's exp
// pass, which is arithmetic the write-combining buffers drain behind. Rows alternate between
// two buffers. With the next row prefetched into L2 (Note [Row prefetch]) this beats ordinary
// stores on two or more threads, and is softmax's default there.
void softmax_row_streamed_avx512(const float* x, float* out, std::int64_t n, float* exps,
                                 SoftmaxPending& pending, NextRow next) {
  const CleanUpperOnReturn clean;
  const bool spread = pending.out != nullptr && n % 16 == 0 &&
                      (reinterpret_cast<std::uintptr_t>(pending.out) & 63U) == 0;
  if (pending.out != nullptr && !spread) softmax_flush_avx512(pending, n);
  Drain drain{};
  if (spread) drain = {pending.exps, pending.out, _mm512_set1_ps(pending.inv)};
  const double sum = row_exp_sum(x, exps, n, next, spread ? &drain : nullptr);
  pending = {out, exps, static_cast<float>(1.0 / sum)};
}

void softmax_flush_avx512(SoftmaxPending& pending, std::int64_t n) {
  if (pending.out != nullptr) scale_row(pending.exps, pending.inv, pending.out, n, true);
  pending = {};
}

bool unary_stream_avx512(EwOp op, const float* a, float* d, std::int64_t n) {
  const auto stream = [&](auto f) {
    row_map(d, n, true,
            [&](std::int64_t i, __mmask16 m) { return f(_mm512_maskz_loadu_ps(m, a + i)); });
  };
  return with_any_unary(op, stream);
}

bool binary_stream_avx512(EwOp op, const float* a, bool a_scalar, const float* b, bool b_scalar,
                          float* d, std::int64_t n) {
  const auto stream = [&](auto f) {
    const __m512 as = a_scalar ? _mm512_set1_ps(*a) : _mm512_setzero_ps();
    const __m512 bs = b_scalar ? _mm512_set1_ps(*b) : _mm512_setzero_ps();
    row_map(d, n, true, [&](std::int64_t i, __mmask16 m) {
      return f(a_scalar ? as : _mm512_maskz_loadu_ps(m, a + i),
               b_scalar ? bs : _mm512_maskz_loadu_ps(m, b + i));
    });
  };
  return with_binary(op, stream);
}

namespace {

// Note [Fused vector groups]
// The chunk path (Note [CPU element-wise chunks]) runs each instruction over 256 elements before
// the next one starts: a chain's loads come in one phase (the loops that read its inputs), its
// arithmetic in another (its gelu), and the profile of bias -> gelu_tanh -> residual put half
// of its time in the adds' loads. Here the program runs over groups of kGroupVecs vectors (64
// elements): every instruction over the group, then the group's result is stored and the next
// group starts. Inputs are read where they lie (no copy into a register), the last instruction
// stores straight to out, and the other registers are vectors in a stack array that stays in
// L1; constants (scalars, broadcast scalars) are set once per call. Per group an instruction
// costs one well-predicted switch. Groups of 2 or 8 vectors are slower than 4, and software
// prefetch of the inputs makes no difference. Linear chains, most programs, take a faster
// evaluator of their own (Note [Linear chains]).
constexpr int kGroupVecs = 4;
constexpr std::int64_t kGroupElems = 16 * kGroupVecs;

// An operand: an input's run, read at the group's element (p), or a register (reg).
struct GroupSrc {
  const float* p;
  std::uint8_t reg;
};

struct GroupStep {
  EwOp op;
  std::uint8_t dst;
  GroupSrc x, y;
};

// The program's operations (inputs and constants resolved) and registers.
struct GroupProgram {
  GroupStep steps[EwProgram::kMaxInstrs];
  int count = 0;
  GroupSrc result{};
  bool last_is_result = false;  // the last step computes the result (stored to out directly)
  __m512 r[EwProgram::kMaxRegs][kGroupVecs];
};

// Vector k of src in the group at element i (kFull: all its lanes, else those of m).
template <bool kFull>
inline __m512 fetch(const GroupProgram& g, const GroupSrc& src, std::int64_t i, int k,
                    __mmask16 m) {
  if (src.p == nullptr) return g.r[src.reg][k];
  const float* p = src.p + i + 16 * k;
  return kFull ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
}

// The group at element i of the run: every step, the result's vectors handed to store(k, v).
template <bool kFull, class Store>
inline void run_group(GroupProgram& g, std::int64_t i, const __mmask16* m, Store store) {
  const auto mask = [m](int k) { return kFull ? static_cast<__mmask16>(0xFFFF) : m[k]; };
  for (int s = 0; s < g.count; ++s) {
    const GroupStep& st = g.steps[s];
    __m512* d = g.r[st.dst];
    const bool to_out = g.last_is_result && s == g.count - 1;
    const auto put = [&](int k, __m512 v) {
      if (to_out) {
        store(k, v);
      } else {
        d[k] = v;
      }
    };
    if (st.op >= EwOp::kNeg) {
      with_any_unary(st.op, [&](auto f) {
        for (int k = 0; k < kGroupVecs; ++k) put(k, f(fetch<kFull>(g, st.x, i, k, mask(k))));
      });
    } else {
      with_binary(st.op, [&](auto f) {
        for (int k = 0; k < kGroupVecs; ++k) {
          put(k, f(fetch<kFull>(g, st.x, i, k, mask(k)), fetch<kFull>(g, st.y, i, k, mask(k))));
        }
      });
    }
  }
  if (!g.last_is_result) {
    for (int k = 0; k < kGroupVecs; ++k) store(k, fetch<kFull>(g, g.result, i, k, mask(k)));
  }
}

// A partial group: the len (< kGroupElems) elements at i, loaded and stored through masks.
inline void run_partial_group(GroupProgram& g, float* d, std::int64_t i, std::int64_t len) {
  __mmask16 m[kGroupVecs];
  for (int k = 0; k < kGroupVecs; ++k) {
    const std::int64_t left = len - 16 * k;
    m[k] = left <= 0 ? static_cast<__mmask16>(0) : tail_mask(left);
  }
  run_group<false>(g, i, m,
                   [&](int k, __m512 v) { _mm512_mask_storeu_ps(d + i + 16 * k, m[k], v); });
}

// Note [Linear chains]
// Most fused programs are chains: each op feeds only the next, its other operand an input or
// a constant (bias -> gelu_tanh -> residual; scale -> mask in softmax's prologue). A chain
// has one live value, so it runs over groups of kChainVecs vectors held in registers: per op
// one switch, then the op over the group's vectors, which are independent of each other. The
// group evaluator (Note [Fused vector groups]) serves any program by keeping its registers in
// a stack array, a store and a reload around every op; a chain needs neither, and comes close
// to a hand-written loop of the same ops. Four vectors a group is the middle way: one vector
// at a time pays the switch for every vector, and from memory larger groups lose (so does
// the hand-written loop), while hot in cache 8 wins or loses with the compiler's inlining.
constexpr int kChainVecs = 4;

// One op of a linear chain: the value is its operand (unary) or one of its two (value_first:
// the left one); the other is an input's run (p) or a constant (c, p null).
struct ChainStep {
  EwOp op;
  bool value_first;
  const float* p;
  __m512 c;
};

struct LinearChain {
  const float* start;  // the input run the value starts from
  ChainStep steps[EwProgram::kMaxInstrs];
  int count = 0;
  // The runs read once, prefetched non-temporally when another run is re-read (Note [Re-read
  // rows]); none otherwise.
  const float* once[EwProgram::kMaxInputs];
  int once_count = 0;
};

// Whether p is a linear chain over the inputs `in` (then filled into ch).
bool linear_chain(const EwProgram& p, const EwOperand* in, LinearChain& ch) {
  enum class Kind : std::uint8_t { kNone, kRun, kConstant, kValue, kSpent };
  Kind kind[EwProgram::kMaxRegs] = {};
  const float* run[EwProgram::kMaxRegs] = {};
  float constant[EwProgram::kMaxRegs] = {};
  int value = -1;  // the register holding the chain's value
  ch.count = 0;
  for (int i = 0; i < p.size; ++i) {
    const EwInstr& c = p.code[static_cast<std::size_t>(i)];
    if (c.op == EwOp::kInput || c.op == EwOp::kScalar) {
      if (c.dst == value) return false;  // a program that reuses registers, not SSA
      const bool scalar = c.op == EwOp::kScalar || in[c.a].scalar;
      kind[c.dst] = scalar ? Kind::kConstant : Kind::kRun;
      constant[c.dst] = c.op == EwOp::kScalar ? c.imm : scalar ? *in[c.a].data : 0.0F;
      run[c.dst] = scalar ? nullptr : in[c.a].data;
      continue;
    }
    const bool unary = c.op >= EwOp::kNeg;
    ChainStep st{c.op, true, nullptr, _mm512_setzero_ps()};
    int other = -1;
    if (value < 0) {  // the first op: the value starts at an input run among its operands
      if (kind[c.a] == Kind::kRun) {
        ch.start = run[c.a];
        other = unary ? -1 : c.b;
      } else if (!unary && kind[c.b] == Kind::kRun) {
        ch.start = run[c.b];
        st.value_first = false;
        other = c.a;
      } else {
        return false;
      }
    } else if (c.a == value && (unary || c.b != value)) {
      other = unary ? -1 : c.b;
    } else if (!unary && c.b == value && c.a != value) {
      st.value_first = false;
      other = c.a;
    } else {
      return false;
    }
    if (other >= 0) {
      if (kind[other] == Kind::kRun) {
        st.p = run[other];
      } else if (kind[other] == Kind::kConstant) {
        st.c = _mm512_set1_ps(constant[other]);
      } else {
        return false;
      }
    }
    if (value >= 0) kind[value] = Kind::kSpent;  // read by this op only
    value = c.dst;
    kind[value] = Kind::kValue;
    ch.steps[ch.count++] = st;
  }
  return ch.count > 0 && p.result == value;
}

// The chain's value at element i (lanes of m).
inline __m512 chain_at(const LinearChain& ch, std::int64_t i, __mmask16 m) {
  __m512 v = _mm512_maskz_loadu_ps(m, ch.start + i);
  for (int s = 0; s < ch.count; ++s) {
    const ChainStep& st = ch.steps[s];
    if (st.op >= EwOp::kNeg) {
      with_any_unary(st.op, [&](auto f) { v = f(v); });
    } else {
      const __m512 o = st.p != nullptr ? _mm512_maskz_loadu_ps(m, st.p + i) : st.c;
      with_binary(st.op, [&](auto f) { v = st.value_first ? f(v, o) : f(o, v); });
    }
  }
  return v;
}

// Note [Re-read rows]
// A bias broadcast over the rows is read again by every row. A row of 4096 floats brings 16
// KiB of bias, and its x and residual 32 KiB more, through a 32 KiB L1 before the next row
// comes back to the bias, so every bias line misses L1, and that costs far more than its L2
// latency: with a scalar in place of the bias the same chain takes as long as a plain add.
// Where a run is re-read and at least kOnceMinRun long, the runs read once are prefetched
// non-temporally (prefetchnta) kOnceAhead elements ahead: they then pass through L1 without
// pushing the bias out as ordinary fills do. At kOnceMinRun the bias survives in L1 anyway,
// and below it the extra prefetches only cost; nearer than kOnceAhead they do less, farther
// less or worse. What did not help: prefetching the bias itself into L1, two rows side by
// side sharing its loads, re-touching its lines mid-row, and splitting each row's columns
// between the threads (the streams restart every 8 KiB).
constexpr std::int64_t kOnceAhead = 768;
constexpr std::int64_t kOnceMinRun = 2048;

// The chain over kChainVecs vectors at element i, stored to d (streamed where `stream`).
inline void chain_group(const LinearChain& ch, std::int64_t i, float* d, bool stream) {
  __m512 v[kChainVecs];
  for (int k = 0; k < kChainVecs; ++k) v[k] = _mm512_loadu_ps(ch.start + i + 16 * k);
  for (int s = 0; s < ch.count; ++s) {
    const ChainStep& st = ch.steps[s];
    if (st.op >= EwOp::kNeg) {
      with_any_unary(st.op, [&](auto f) {
        for (int k = 0; k < kChainVecs; ++k) v[k] = f(v[k]);
      });
    } else if (st.p != nullptr) {
      with_binary(st.op, [&](auto f) {
        for (int k = 0; k < kChainVecs; ++k) {
          const __m512 o = _mm512_loadu_ps(st.p + i + 16 * k);
          v[k] = st.value_first ? f(v[k], o) : f(o, v[k]);
        }
      });
    } else {
      with_binary(st.op, [&](auto f) {
        for (int k = 0; k < kChainVecs; ++k) v[k] = st.value_first ? f(v[k], st.c) : f(st.c, v[k]);
      });
    }
  }
  for (int k = 0; k < kChainVecs; ++k) store16(d + i + 16 * k, v[k], stream);
}

// d[0..n) = the chain: whole groups, then vector by vector; streamed from d's first 64-byte
// line where `stream` (the head before it and the tail through masked ordinary stores).
void run_chain(const LinearChain& ch, float* d, std::int64_t n, bool stream) {
  std::int64_t i = 0;
  if (stream) {
    i = stream_head(d, n);
    if (i > 0) _mm512_mask_storeu_ps(d, tail_mask(i), chain_at(ch, 0, tail_mask(i)));
  }
  for (; i + 16 * kChainVecs <= n; i += 16 * kChainVecs) {
    for (int r = 0; r < ch.once_count; ++r) {
      for (int k = 0; k < kChainVecs; ++k) {
        _mm_prefetch(reinterpret_cast<const char*>(ch.once[r] + i + kOnceAhead + 16 * k),
                     _MM_HINT_NTA);
      }
    }
    chain_group(ch, i, d, stream);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(d + i, m, chain_at(ch, i, m));
  }
}

}  // namespace

bool program_avx512_covers(const EwProgram& p) {
  for (int i = 0; i < p.size; ++i) {
    const EwOp op = p.code[static_cast<std::size_t>(i)].op;
    if (op == EwOp::kInput || op == EwOp::kScalar) continue;
    const auto none = [](auto) {};
    if (op >= EwOp::kNeg ? !with_any_unary(op, none) : !with_binary(op, none)) return false;
  }
  return true;
}

void program_run_avx512(const EwProgram& p, const EwOperand* in, float* d, std::int64_t n,
                        bool stream) {
  LinearChain ch;
  if (linear_chain(p, in, ch)) {
    bool reread = false;  // and long enough to be pushed out of L1 (Note [Re-read rows])
    for (int k = 0; k < p.inputs && n >= kOnceMinRun; ++k) {
      reread = reread || (in[k].reread && !in[k].scalar);
    }
    for (int k = 0; k < p.inputs && reread; ++k) {
      if (!in[k].reread && !in[k].scalar) ch.once[ch.once_count++] = in[k].data;
    }
    run_chain(ch, d, n, stream);
    return;
  }
  GroupProgram g;
  GroupSrc src[EwProgram::kMaxRegs] = {};
  for (int i = 0; i < p.size; ++i) {
    const EwInstr& c = p.code[static_cast<std::size_t>(i)];
    const bool scalar_input = c.op == EwOp::kInput && in[c.a].scalar;
    src[c.dst] = {nullptr, c.dst};
    if (c.op == EwOp::kScalar || scalar_input) {
      const __m512 v = _mm512_set1_ps(scalar_input ? *in[c.a].data : c.imm);
      for (int k = 0; k < kGroupVecs; ++k) g.r[c.dst][k] = v;
    } else if (c.op == EwOp::kInput) {
      src[c.dst].p = in[c.a].data;
    } else {
      g.steps[g.count++] = {c.op, c.dst, src[c.a], src[c.b]};
    }
  }
  g.result = src[p.result];
  g.last_is_result = g.count > 0 && g.steps[g.count - 1].dst == p.result;
  std::int64_t i = 0;
  if (stream) {  // ordinary stores up to d's first 64-byte line, then whole lines streamed
    i = stream_head(d, n);
    if (i > 0) run_partial_group(g, d, 0, i);
  }
  for (; i + kGroupElems <= n; i += kGroupElems) {
    run_group<true>(g, i, nullptr, [&](int k, __m512 v) { store16(d + i + 16 * k, v, stream); });
  }
  if (i < n) run_partial_group(g, d, i, n - i);
}

}  // namespace ka::kernels::detail
