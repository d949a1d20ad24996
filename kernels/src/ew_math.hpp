// Element-wise math shared by the CPU kernels (element-wise programs, reduction prologues,
// softmax, GEMM epilogues): loops over short contiguous runs written so the compiler
// vectorizes them, with ATen's fp32 semantics. See Note [Vectorizable exp].
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ka/kernels/elementwise.hpp>
#include <ka/kernels/gemm.hpp>

/// The scalar math below is always inlined into the loops that use it, which are compiled for
/// several ISAs: an out-of-line copy compiled for one must never serve another's loops (Note
/// [Element-wise loops per ISA]).
#define KA_EW_INLINE inline __attribute__((always_inline))

namespace ka::kernels::detail {

// Note [Vectorizable exp]
// std::exp is an opaque library call, so a loop calling it runs one element at a time. exp_f32
// is Cephes' expf (|relative error| < 2 ulp, as Sleef's expf_u10 that ATen uses): x = n·ln2 + r
// with n rounded by the 1.5·2^23 trick (no rounding instruction needed), a degree-6 polynomial
// for e^r, and 2^n built in two halves so n = 128 does not overflow the exponent field. It is
// branch-free, so loops over it vectorize. Below kExpFlushBelow it returns 0 (ATen returns
// denormals there, an absolute difference under 1.2e-38; Note [No subnormal exp]); above 88.72
// it returns +inf; NaN stays NaN.
KA_EW_INLINE float pow2i(std::int32_t e) {
  const std::int32_t bits = (e + 127) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Note [No subnormal exp]
// Every exp of ka's returns 0, not a subnormal, below kExpFlushBelow, just above ln(FLT_MIN)
// (so what it does return is a normal float). Intel cores (with FTZ off, as in any PyTorch
// program) take a microcode assist of some hundred cycles for each operation whose result is
// subnormal, and for each subnormal operand. A softmax over a row with masked positions (0 and
// -1e4, or -inf) computes e^(-1e4 - max) for every masked element, and underflowing through
// the subnormals then costs an assist per element (figures in the commit body; AMD's cores
// showed no such cost). The values lost are below 1.2e-38.
constexpr float kExpFlushBelow = -87.3365F;

KA_EW_INLINE float exp_f32(float x) {
  // Selects as separate statements (and -fno-trapping-math on the kernels' sources) keep the
  // loop free of control flow, so it vectorizes.
  constexpr float kLo = kExpFlushBelow;
  constexpr float kHi = 88.72283172607421875F;
  float xc = x < kLo ? kLo : x;
  xc = xc > kHi ? kHi : xc;
  xc = x != x ? 0.0F : xc;
  const float t = xc * 1.44269504088896341F;
  const float fn = (t + 12582912.0F) - 12582912.0F;  // round to nearest
  const auto n = static_cast<std::int32_t>(fn);
  float r = xc - fn * 0.693359375F;
  r = r - fn * -2.12194440e-4F;
  const float z = r * r;
  float p = 1.9875691500E-4F;
  p = p * r + 1.3981999507E-3F;
  p = p * r + 8.3334519073E-3F;
  p = p * r + 4.1665795894E-2F;
  p = p * r + 1.6666665459E-1F;
  p = p * r + 5.0000001201E-1F;
  p = p * z + r + 1.0F;
  const std::int32_t h = n >> 1;
  float y = p * pow2i(h) * pow2i(n - h);
  y = x < kLo ? 0.0F : y;
  y = x > kHi ? HUGE_VALF : y;
  y = x != x ? x : y;
  return y;
}

/// tanh, Cephes' tanhf (about 2 ulp): an odd polynomial below |x| = 0.625, else
/// 1 − 2/(e^(2|x|) + 1) with the sign restored. Branch-free.
KA_EW_INLINE float tanh_f32(float x) {
  const float ax = x < 0.0F ? -x : x;
  const float e = exp_f32(2.0F * ax);
  float big = 1.0F - 2.0F / (e + 1.0F);
  big = x < 0.0F ? -big : big;
  const float z = x * x;
  float p = -5.70498872745E-3F;
  p = p * z + 2.06390887954E-2F;
  p = p * z - 5.37397155531E-2F;
  p = p * z + 1.33314422036E-1F;
  p = p * z - 3.33332819422E-1F;
  const float small = p * z * x + x;
  float y = ax < 0.625F ? small : big;
  y = x != x ? x : y;
  return y;
}

/// erf as a rational function on [−4, 4] (Eigen's generic_fast_erf_float, a few ulp); ±1
/// beyond. Branch-free.
KA_EW_INLINE float erf_f32(float x) {
  float c = x < -4.0F ? -4.0F : x;
  c = c > 4.0F ? 4.0F : c;
  const float x2 = c * c;
  float p = -2.72614225801306e-10F;
  p = p * x2 + 2.77068142495902e-08F;
  p = p * x2 - 2.10102402082508e-06F;
  p = p * x2 - 5.69250639462346e-05F;
  p = p * x2 - 7.34990630326855e-04F;
  p = p * x2 - 2.95459980854025e-03F;
  p = p * x2 - 1.60960333262415e-02F;
  p = p * c;
  float q = -1.45660718464996e-05F;
  q = q * x2 - 2.13374055278905e-04F;
  q = q * x2 - 1.68282697438203e-03F;
  q = q * x2 - 7.37332916720468e-03F;
  q = q * x2 - 1.42647390514189e-02F;
  float y = p / q;
  y = x != x ? x : y;
  return y;
}

KA_EW_INLINE float sigmoid_f32(float x) { return 1.0F / (1.0F + exp_f32(-x)); }
KA_EW_INLINE float gelu_f32(float x) {
  return 0.5F * x * (1.0F + erf_f32(x * 0.70710678118654752F));
}
KA_EW_INLINE float gelu_tanh_f32(float x) {
  const float inner = 0.79788456080286536F * (x + 0.044715F * x * x * x);
  return 0.5F * x * (1.0F + tanh_f32(inner));
}
// NaN < 0 is false: NaN stays.
KA_EW_INLINE float relu_f32(float x) { return x < 0.0F ? 0.0F : x; }
/// max(a, b) with NaN propagating from either side (two selects, so loops over it vectorize).
KA_EW_INLINE float max_f32(float a, float b) {
  const float m = a > b ? a : b;  // NaN in b: the comparison is false, m = b
  return a != a ? a : m;
}

/// d[i] = op(a[i]) for a unary EwOp (kNeg .. kSilu); a and d must not overlap. exp, sigmoid,
/// silu and gelu_tanh take the AVX-512 versions when avx512_active(); everything else, like
/// the other loops below, runs the active ISA path's compilation (Note [Element-wise loops
/// per ISA]).
void unary_run(EwOp op, const float* __restrict a, float* __restrict d, std::int64_t n);

/// The CPU kernels' ISA paths (gemm_cpu_isa() as a value).
enum class CpuPath : int { kGeneric, kAvx2, kAvx512 };
/// The path in use: the CPU's best, or what KA_CPU_ISA / force_cpu_isa chose.
CpuPath active_cpu_path();
/// Whether the CPU kernels' AVX-512 code paths are in use: the CPU has AVX-512 and neither
/// KA_CPU_ISA nor force_cpu_isa chose a narrower family (the GEMM's micro-kernel is "avx512").
bool avx512_active();

// Note [Clean upper state on return]
// Every function that baseline code calls in an AVX2 or AVX-512 translation unit (these
// declarations, the EwLoops tables, the GEMM's MicroKernelInfo) returns with VZEROUPPER done.
// SSE code that runs while the upper halves of the vector registers are in use pays a state
// transition on Intel cores, per call, far more than a short row's work. GCC inserts VZEROUPPER
// before a return itself, but not after a call that passes a __m512 to an out-of-line helper
// or tail-calls it: such an entry point holds a CleanUpperOnReturn (ew_math_avx512.cpp).
// UpperState.* in the kernels' tests checks every entry point through XINUSE.

/// The AVX-512 versions (ew_math_avx512.cpp); call only when avx512_active(). unary_run_avx512
/// returns false for the ops it does not cover.
bool unary_run_avx512(EwOp op, const float* __restrict a, float* __restrict d, std::int64_t n);
/// c[r * ldc + j] = op(c[r * ldc + j]) in place for r < rows, j < cols; false (nothing
/// written) for the ops it does not cover.
bool unary_rows_inplace_avx512(EwOp op, float* c, std::int64_t ldc, std::int64_t rows,
                               std::int64_t cols);
float exp_shifted_sum_avx512(const float* __restrict x, float shift, float* __restrict d,
                             std::int64_t n);
void stream_store_avx512(float* __restrict dst, const float* __restrict src, std::int64_t n);
/// d[0..n) = op(a) computed and written with streaming stores in one pass (ordinary stores up
/// to d's first 64-byte line and for the tail); false for the ops it does not cover (then
/// nothing is written). a may be d. Call stream_fence() before handing d to another thread.
bool unary_stream_avx512(EwOp op, const float* a, float* d, std::int64_t n);
/// The same for a binary op (add, sub, mul, div, max); an operand marked scalar is the one
/// float it points to, broadcast.
bool binary_stream_avx512(EwOp op, const float* a, bool a_scalar, const float* b, bool b_scalar,
                          float* d, std::int64_t n);
/// An element-wise program's input over a run of elements: `data` points to the run's first
/// element, or (scalar) to the one float broadcast over the run. `reread`: the run is read
/// again by the next row (a bias broadcast over the rows; Note [Re-read rows]).
struct EwOperand {
  const float* data = nullptr;
  bool scalar = false;
  bool reread = false;
};
/// Whether program_run_avx512 has a vector form of every instruction of `p`.
bool program_avx512_covers(const EwProgram& p);
/// d[0..n) = p(in[0..p.inputs)) in groups of 64 elements: a linear chain's held in registers
/// (Note [Linear chains]), any other program's in a stack array (Note [Fused vector groups]);
/// p must be covered. d may be an input's run exactly. `stream`: d written with
/// streaming stores (ordinary ones up to its first 64-byte line and for the tail); call
/// stream_fence() before handing d to another thread.
void program_run_avx512(const EwProgram& p, const EwOperand* in, float* d, std::int64_t n,
                        bool stream);
/// The sums of `count` (1 to 4) contiguous rows x[r][0..n), read side by side (Note [Row
/// sums]): in float over blocks of 2048 elements, in double across them.
void rows_sum_avx512(const float* const* x, int count, std::int64_t n, double* sums);
/// The sum of one contiguous run x[0..n), its four quarters read side by side when it is long.
double run_sum_avx512(const float* x, std::int64_t n);
/// The AVX2 + FMA versions (ew_math_avx2.cpp) of the instruction-bound unary ops (exp, tanh,
/// both gelus, sigmoid, silu) and of softmax's exp-and-sum; call only when the active path is
/// avx2. unary_run_avx2 returns false for the ops it does not cover.
bool unary_run_avx2(EwOp op, const float* __restrict a, float* __restrict d, std::int64_t n);
/// As unary_rows_inplace_avx512 (relu and the ops unary_run_avx2 covers).
bool unary_rows_inplace_avx2(EwOp op, float* c, std::int64_t ldc, std::int64_t rows,
                             std::int64_t cols);
/// online_softmax_rows on the AVX2 path.
void online_softmax_rows_avx2(const float* s, std::int64_t lds, std::int64_t rows,
                              std::int64_t cols, float* p, std::int64_t ldp, float* m, float* l,
                              float* o, std::int64_t ldo, std::int64_t dv);
float exp_shifted_sum_avx2(const float* __restrict x, float shift, float* __restrict d,
                           std::int64_t n);
void stream_store_avx2(float* __restrict dst, const float* __restrict src, std::int64_t n);
/// Where the row kernels prefetch the next row's x to (the `prefetch` tunable, Note [Row
/// prefetch]): not at all, into L1 (prefetcht0) or into L2 (prefetcht2).
enum class RowPrefetch : int { kNone = 0, kL1 = 1, kL2 = 2 };
/// The next row's x (null: none, or not to be prefetched, as with kNone) and where it goes.
struct NextRow {
  const float* x = nullptr;
  RowPrefetch to = RowPrefetch::kL1;
};
/// layer_norm of one contiguous row of n floats (Note [AVX-512 row kernels]): out = (x − mean)
/// · rstd · w + b, w and b optional (null); out may be x. `stream`: out is written with
/// streaming stores (call stream_fence() before handing it to another thread). Prefetches
/// `next` while it writes out.
void layer_norm_row_avx512(const float* x, const float* w, const float* b, float* out,
                           std::int64_t n, float eps, bool stream, NextRow next);
/// softmax of one contiguous row of n floats into out (ordinary stores; out may be x),
/// prefetching `next` during its exp pass.
void softmax_row_avx512(const float* x, float* out, std::int64_t n, NextRow next);
/// A streamed softmax row whose exponentials wait in `exps` to be scaled and streamed out
/// (Note [Pipelined softmax]); out == nullptr: none.
struct SoftmaxPending {
  float* out = nullptr;
  const float* exps = nullptr;
  float inv = 0.0F;
};
/// softmax of one contiguous row, written with streaming stores one row late: its exponentials
/// go to `exps` (n floats, not the pending row's buffer) and `pending` becomes this row, while
/// the previous pending row (same n) is streamed out during this row's exp pass. out may be x.
/// Call softmax_flush_avx512 after the last row, then stream_fence().
void softmax_row_streamed_avx512(const float* x, float* out, std::int64_t n, float* exps,
                                 SoftmaxPending& pending, NextRow next);
/// Streams the pending row out (nothing when there is none).
void softmax_flush_avx512(SoftmaxPending& pending, std::int64_t n);
/// online_softmax_rows on the AVX-512 path.
void online_softmax_rows_avx512(const float* s, std::int64_t lds, std::int64_t rows,
                                std::int64_t cols, float* p, std::int64_t ldp, float* m, float* l,
                                float* o, std::int64_t ldo, std::int64_t dv);

// Note [One softmax call per block]
// Fused attention's step 2 per row is a max, an exp-and-sum and a rescale of O: through the
// element-wise entry points, four calls and their dispatch per row, a fifth of the work at 256
// keys. The AVX-512 and AVX2 paths take a block's rows in one call; the portable path keeps
// the calls per row.

/// Fused attention's online-softmax step (Note [Attention in blocks of keys]) for `rows` rows
/// of scores s (cols keys each, rows lds apart): m' = max(m, max_j s), p = e^(s − m'),
/// l = l·e^(m − m') + Σ p, and the row of o (dv floats) scaled by e^(m − m') where m grows; a
/// row whose scores so far are all -inf gets p = 0 and keeps m = -inf. NaN scores are skipped
/// by the max and reach l through their exp, as in ATen's softmax.
void online_softmax_rows(const float* s, std::int64_t lds, std::int64_t rows, std::int64_t cols,
                         float* p, std::int64_t ldp, float* m, float* l, float* o,
                         std::int64_t ldo, std::int64_t dv);

/// online_softmax_rows' method, which each ISA's version instantiates with its own pieces:
/// row_max(x, n) (NaN skipped), exp_sum(x, shift, p, n) (p = e^(x − shift), returns Σ p) and
/// rescale(o_row, d, dv) (o_row *= e^d, returns e^d). Always inlined, and it calls no library
/// template, so nothing compiled for one ISA can serve another (Note [Element-wise loops per
/// ISA]).
template <class RowMax, class ExpSum, class Rescale>
KA_EW_INLINE void online_softmax_rows_with(const float* s, std::int64_t lds, std::int64_t rows,
                                           std::int64_t cols, float* p, std::int64_t ldp,
                                           float* m, float* l, float* o, std::int64_t ldo,
                                           std::int64_t dv, RowMax row_max, ExpSum exp_sum,
                                           Rescale rescale) {
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* srow = s + i * lds;
    float* prow = p + i * ldp;
    const float top = row_max(srow, cols);
    const float m_new = top > m[i] ? top : m[i];
    if (m_new == -HUGE_VALF) {  // every score so far is -inf: nothing to add yet
      for (std::int64_t j = 0; j < cols; ++j) prow[j] = 0.0F;
      continue;
    }
    const float sum = exp_sum(srow, m_new, prow, cols);
    if (m_new != m[i]) l[i] *= rescale(o + i * ldo, m[i] - m_new, dv);  // 0 when m was -inf
    l[i] += sum;
    m[i] = m_new;
  }
}

/// d[i] = a[i] op b[i] for a binary EwOp (kAdd .. kMax). d may alias a or b exactly.
void binary_run(EwOp op, const float* a, const float* b, float* d, std::int64_t n);

/// dst[0..n) = src[0..n) with non-temporal (streaming) stores where dst is 16-byte aligned:
/// the lines go to memory without being read first (no read-for-ownership) and without
/// evicting the caches, for outputs larger than the last-level cache. See Note [Streaming
/// stores]. src and dst must not overlap. Call stream_fence() before the data is handed to
/// another thread.
void stream_store(float* __restrict dst, const float* __restrict src, std::int64_t n);
/// Orders earlier streaming stores before later stores (sfence).
void stream_fence();

/// d[i] = exp(x[i] − shift) · scale (softmax's inner loop); x and d must not overlap.
void exp_shifted_run(const float* __restrict x, float shift, float scale, float* __restrict d,
                     std::int64_t n);

/// The EwOp an epilogue applies (kInput for none).
inline EwOp epilogue_op(Epilogue e) {
  switch (e) {
    case Epilogue::kRelu:
      return EwOp::kRelu;
    case Epilogue::kGelu:
      return EwOp::kGelu;
    case Epilogue::kGeluTanh:
      return EwOp::kGeluTanh;
    case Epilogue::kSigmoid:
      return EwOp::kSigmoid;
    case Epilogue::kSilu:
      return EwOp::kSilu;
    case Epilogue::kNone:
      break;
  }
  return EwOp::kInput;
}

/// c[r * ldc + j] = act(c[r * ldc + j]) in place for r < rows, j < cols: a GEMM's micro-tile
/// in one call (Note [Epilogue in one call per tile]).
void apply_epilogue(Epilogue e, float* c, std::int64_t ldc, std::int64_t rows, std::int64_t cols);

}  // namespace ka::kernels::detail

namespace ka::kernels::detail {

/// Validates the operands of an element-wise program (used by the element-wise kernel and the
/// reductions' prologues): float32 CPU tensors, inputs with out's sizes, no partial overlap
/// with out, a well-formed program. Throws ka::ValueError prefixed with `kernel`.
void validate_ew_operands(const char* kernel, const TensorView& out,
                          const std::array<TensorView, EwProgram::kMaxInputs>& inputs,
                          const EwProgram& p);

/// Elements per chunk of the CPU kernels' register buffers.
constexpr std::int64_t kEwChunk = 256;

/// Evaluates `p` over `len` (<= kEwChunk) elements whose inputs are the contiguous runs
/// in[0..p.inputs); returns the result run (an input run or one of `regs`).
inline const float* eval_program_chunk(const EwProgram& p, const float* const* in, std::int64_t len,
                                       float (*regs)[kEwChunk]) {
  const float* rp[EwProgram::kMaxRegs] = {};
  for (int i = 0; i < p.size; ++i) {
    const EwInstr& c = p.code[static_cast<std::size_t>(i)];
    float* dst = regs[c.dst];
    if (c.op == EwOp::kInput) {
      rp[c.dst] = in[c.a];
      continue;
    }
    if (c.op == EwOp::kScalar) {
      for (std::int64_t j = 0; j < len; ++j) dst[j] = c.imm;
    } else if (c.op >= EwOp::kNeg) {
      unary_run(c.op, rp[c.a], dst, len);
    } else {
      binary_run(c.op, rp[c.a], rp[c.b], dst, len);
    }
    rp[c.dst] = dst;
  }
  return rp[p.result];
}

/// d[i] = exp(x[i] − shift) and returns the sum of d (16 lanes); x and d must not overlap.
float exp_shifted_sum(const float* __restrict x, float shift, float* __restrict d, std::int64_t n);

/// Sum of x[0..n) in 16 independent lanes (vectorizes; error grows with n/16, not n).
float lane_sum(const float* x, std::int64_t n);
/// Max of x[0..n) ignoring NaN; -inf for n == 0 (softmax still returns NaN for a row with a
/// NaN: e^(NaN − m) makes its sum NaN).
float lane_max(const float* x, std::int64_t n);
/// Sum of (x[i] − mean)² in 16 lanes.
float lane_sum_sq_dev(const float* x, float mean, std::int64_t n);
/// d[i] = (x[i] − mean) · rstd · w[i] + b[i]; w and b may be null (1 and 0).
void normalize_run(const float* x, float mean, float rstd, const float* w, const float* b, float* d,
                   std::int64_t n);
/// d[i] = x[i] · f; x and d must not overlap.
void scale_run(const float* __restrict x, float f, float* __restrict d, std::int64_t n);
/// d[i] *= f.
void scale_inplace(float* d, float f, std::int64_t n);
/// m[i] = max(m[i], x[i]) (NaN in x skipped, as lane_max).
void max_accumulate(float* __restrict m, const float* __restrict x, std::int64_t n);
/// xd[i] = exp(xd[i] − m[i]); acc[i] += xd[i].
void exp_sub_accumulate(float* __restrict xd, const float* __restrict m, float* __restrict acc,
                        std::int64_t n);
/// d[i] *= f[i].
void mul_inplace(float* __restrict d, const float* __restrict f, std::int64_t n);
/// acc[i] += x[i].
void accumulate_f32(float* __restrict acc, const float* __restrict x, std::int64_t n);
/// acc[i] += (x0[i] + x1[i]) + (x2[i] + x3[i]): four rows of a column sum at once.
void accumulate4_f32(float* __restrict acc, const float* x0, const float* x1, const float* x2,
                     const float* x3, std::int64_t n);
/// acc[i] += x[i] in double.
void accumulate_f64(double* __restrict acc, const float* __restrict x, std::int64_t n);

}  // namespace ka::kernels::detail
