// Element-wise math shared by the CPU kernels (element-wise programs, reduction prologues,
// softmax, GEMM epilogues): loops over short contiguous runs written so the compiler
// vectorizes them, with ATen's fp32 semantics. See Note [Vectorizable exp].
#pragma once

#include <ka/kernels/elementwise.hpp>
#include <ka/kernels/gemm.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace ka::kernels::detail {

// Note [Vectorizable exp]
// std::exp is an opaque library call, so a loop calling it runs one element at a time. exp_f32
// is Cephes' expf (|relative error| < 2 ulp, as Sleef's expf_u10 that ATen uses): x = n·ln2 + r
// with n rounded by the 1.5·2^23 trick (no rounding instruction needed), a degree-6 polynomial
// for e^r, and 2^n built in two halves so n = 128 does not overflow the exponent field. It is
// branch-free, so loops over it vectorize. Below −87.34 it returns 0 (ATen returns denormals
// there, an absolute difference under 1.2e-38); above 88.72 it returns +inf; NaN stays NaN.
inline float pow2i(std::int32_t e) {
  const std::int32_t bits = (e + 127) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline float exp_f32(float x) {
  const float xc = x < -87.3365478515625F ? -87.3365478515625F
                                          : (x > 88.72283172607421875F ? 88.72283172607421875F : x);
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
  const std::int32_t h = n / 2;
  float y = p * pow2i(h) * pow2i(n - h);
  y = x < -87.3365478515625F ? 0.0F : y;
  y = x > 88.72283172607421875F ? HUGE_VALF : y;
  return x != x ? x : y;
}

inline float sigmoid_f32(float x) { return 1.0F / (1.0F + exp_f32(-x)); }
inline float gelu_f32(float x) { return 0.5F * x * (1.0F + std::erf(x * 0.70710678118654752F)); }
inline float gelu_tanh_f32(float x) {
  const float inner = 0.79788456080286536F * (x + 0.044715F * x * x * x);
  return 0.5F * x * (1.0F + std::tanh(inner));
}
inline float relu_f32(float x) { return x < 0.0F ? 0.0F : x; }  // NaN < 0 is false: NaN stays
inline float max_f32(float a, float b) { return (a > b || a != a) ? a : b; }  // NaN propagates

/// d[i] = op(a[i]) for a unary EwOp (kNeg .. kSilu); a and d must not overlap.
inline void unary_run(EwOp op, const float* __restrict a, float* __restrict d, std::int64_t n) {
  switch (op) {
    case EwOp::kNeg: for (std::int64_t i = 0; i < n; ++i) d[i] = -a[i]; break;
    case EwOp::kExp: for (std::int64_t i = 0; i < n; ++i) d[i] = exp_f32(a[i]); break;
    case EwOp::kTanh: for (std::int64_t i = 0; i < n; ++i) d[i] = std::tanh(a[i]); break;
    case EwOp::kRelu: for (std::int64_t i = 0; i < n; ++i) d[i] = relu_f32(a[i]); break;
    case EwOp::kGelu: for (std::int64_t i = 0; i < n; ++i) d[i] = gelu_f32(a[i]); break;
    case EwOp::kGeluTanh: for (std::int64_t i = 0; i < n; ++i) d[i] = gelu_tanh_f32(a[i]); break;
    case EwOp::kSigmoid: for (std::int64_t i = 0; i < n; ++i) d[i] = sigmoid_f32(a[i]); break;
    case EwOp::kSilu: for (std::int64_t i = 0; i < n; ++i) d[i] = a[i] / (1.0F + exp_f32(-a[i])); break;
    default: break;
  }
}

/// d[i] = a[i] op b[i] for a binary EwOp (kAdd .. kMax). d may alias a or b exactly.
inline void binary_run(EwOp op, const float* a, const float* b, float* d, std::int64_t n) {
  switch (op) {
    case EwOp::kAdd: for (std::int64_t i = 0; i < n; ++i) d[i] = a[i] + b[i]; break;
    case EwOp::kSub: for (std::int64_t i = 0; i < n; ++i) d[i] = a[i] - b[i]; break;
    case EwOp::kMul: for (std::int64_t i = 0; i < n; ++i) d[i] = a[i] * b[i]; break;
    case EwOp::kDiv: for (std::int64_t i = 0; i < n; ++i) d[i] = a[i] / b[i]; break;
    case EwOp::kMax: for (std::int64_t i = 0; i < n; ++i) d[i] = max_f32(a[i], b[i]); break;
    default: break;
  }
}

/// The EwOp an epilogue applies (kInput for none).
inline EwOp epilogue_op(Epilogue e) {
  switch (e) {
    case Epilogue::kRelu: return EwOp::kRelu;
    case Epilogue::kGelu: return EwOp::kGelu;
    case Epilogue::kGeluTanh: return EwOp::kGeluTanh;
    case Epilogue::kSigmoid: return EwOp::kSigmoid;
    case Epilogue::kSilu: return EwOp::kSilu;
    case Epilogue::kNone: break;
  }
  return EwOp::kInput;
}

/// p[i] = act(p[i]) in place on a contiguous run.
inline void apply_epilogue(Epilogue e, float* p, std::int64_t n) {
  if (e == Epilogue::kNone) return;
  // unary_run takes restrict operands (so it vectorizes without alias checks): go through a
  // small buffer rather than passing p twice.
  float tmp[256];
  for (std::int64_t i = 0; i < n; i += 256) {
    const std::int64_t len = n - i < 256 ? n - i : 256;
    std::memcpy(tmp, p + i, static_cast<std::size_t>(len) * sizeof(float));
    unary_run(epilogue_op(e), tmp, p + i, len);
  }
}

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
inline const float* eval_program_chunk(const EwProgram& p, const float* const* in,
                                       std::int64_t len, float (*regs)[kEwChunk]) {
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

constexpr int kLanes = 16;

/// Sum of x[0..n) with 16 independent lanes (vectorizes; error grows with n/16, not n).
inline float lane_sum(const float* x, std::int64_t n) {
  float acc[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += x[i + l];
  }
  for (int l = 0; i < n; ++i, ++l) acc[l] += x[i];
  for (int w = kLanes / 2; w > 0; w /= 2) {
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  }
  return acc[0];
}

/// Max of x[0..n) (NaN propagates); -inf for n == 0.
inline float lane_max(const float* x, std::int64_t n) {
  float acc[kLanes];
  for (auto& a : acc) a = -HUGE_VALF;
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] = max_f32(x[i + l], acc[l]);
  }
  for (int l = 0; i < n; ++i, ++l) acc[l] = max_f32(x[i], acc[l]);
  for (int w = kLanes / 2; w > 0; w /= 2) {
    for (int l = 0; l < w; ++l) acc[l] = max_f32(acc[l], acc[l + w]);
  }
  return acc[0];
}

}  // namespace ka::kernels::detail
