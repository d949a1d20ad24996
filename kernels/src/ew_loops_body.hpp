// The element-wise loops of ew_loops.hpp, included once by each ISA's translation unit
// (ew_loops_generic.cpp, ew_loops_avx2.cpp, ew_loops_avx512.cpp), which defines
// KA_EW_LOOPS_TABLE (the table's name) and KA_EW_LOOPS_ISA and is compiled for that ISA.
// No include guard: Note [Element-wise loops per ISA].
#include "ew_loops.hpp"
#include "ew_math.hpp"

#include <cmath>

namespace ka::kernels::detail {
namespace {
namespace loops {

void unary_run(EwOp op, const float* __restrict a, float* __restrict d, std::int64_t n) {
  switch (op) {
    case EwOp::kNeg:
      for (std::int64_t i = 0; i < n; ++i) d[i] = -a[i];
      break;
    case EwOp::kExp:
      for (std::int64_t i = 0; i < n; ++i) d[i] = exp_f32(a[i]);
      break;
    case EwOp::kTanh:
      for (std::int64_t i = 0; i < n; ++i) d[i] = tanh_f32(a[i]);
      break;
    case EwOp::kRelu:
      for (std::int64_t i = 0; i < n; ++i) d[i] = relu_f32(a[i]);
      break;
    case EwOp::kGelu:
      for (std::int64_t i = 0; i < n; ++i) d[i] = gelu_f32(a[i]);
      break;
    case EwOp::kGeluTanh:
      for (std::int64_t i = 0; i < n; ++i) d[i] = gelu_tanh_f32(a[i]);
      break;
    case EwOp::kSigmoid:
      for (std::int64_t i = 0; i < n; ++i) d[i] = sigmoid_f32(a[i]);
      break;
    case EwOp::kSilu:
      for (std::int64_t i = 0; i < n; ++i) d[i] = a[i] / (1.0F + exp_f32(-a[i]));
      break;
    default:
      break;
  }
}

float exp_shifted_sum(const float* __restrict x, float shift, float* __restrict d,
                      std::int64_t n) {
  constexpr int kLanes = 16;
  float acc[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float v = exp_f32(x[i + l] - shift);
      d[i + l] = v;
      acc[l] += v;
    }
  }
  for (int l = 0; i < n; ++i, ++l) {
    const float v = exp_f32(x[i] - shift);
    d[i] = v;
    acc[l] += v;
  }
  for (int w = kLanes / 2; w > 0; w /= 2) {
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  }
  return acc[0];
}

void binary_run(EwOp op, const float* a, const float* b, float* d, std::int64_t n) {
  switch (op) {
    case EwOp::kAdd:
      for (std::int64_t i = 0; i < n; ++i) d[i] = a[i] + b[i];
      break;
    case EwOp::kSub:
      for (std::int64_t i = 0; i < n; ++i) d[i] = a[i] - b[i];
      break;
    case EwOp::kMul:
      for (std::int64_t i = 0; i < n; ++i) d[i] = a[i] * b[i];
      break;
    case EwOp::kDiv:
      for (std::int64_t i = 0; i < n; ++i) d[i] = a[i] / b[i];
      break;
    case EwOp::kMax:
      for (std::int64_t i = 0; i < n; ++i) d[i] = max_f32(a[i], b[i]);
      break;
    default:
      break;
  }
}

void exp_shifted_run(const float* __restrict x, float shift, float scale, float* __restrict d,
                     std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) d[i] = exp_f32(x[i] - shift) * scale;
}

float lane_sum(const float* x, std::int64_t n) {
  constexpr int kLanes = 16;
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

float lane_max(const float* x, std::int64_t n) {
  // One select per element (a plain maxps): NaN is skipped, see the declaration. 64 lanes:
  // four independent vector chains hide the compare-and-select latency that one chain of 16
  // waits on.
  constexpr int kLanes = 64;
  float acc[kLanes];
  for (auto& a : acc) a = -HUGE_VALF;
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
  }
  for (int l = 0; i < n; ++i, ++l) acc[l] = x[i] > acc[l] ? x[i] : acc[l];
  // Halving, as lane_sum: a chain of 63 scalar selects would cost more than a short row.
  for (int w = kLanes / 2; w > 0; w /= 2) {
    for (int l = 0; l < w; ++l) acc[l] = acc[l + w] > acc[l] ? acc[l + w] : acc[l];
  }
  return acc[0];
}

float lane_sum_sq_dev(const float* x, float mean, std::int64_t n) {
  constexpr int kLanes = 16;
  float acc[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float d = x[i + l] - mean;
      acc[l] += d * d;
    }
  }
  for (int l = 0; i < n; ++i, ++l) {
    const float d = x[i] - mean;
    acc[l] += d * d;
  }
  for (int w = kLanes / 2; w > 0; w /= 2) {
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  }
  return acc[0];
}

void normalize_run(const float* x, float mean, float rstd, const float* w, const float* b, float* d,
                   std::int64_t n) {
  if (w != nullptr && b != nullptr) {
    for (std::int64_t i = 0; i < n; ++i) d[i] = (x[i] - mean) * rstd * w[i] + b[i];
  } else if (w != nullptr) {
    for (std::int64_t i = 0; i < n; ++i) d[i] = (x[i] - mean) * rstd * w[i];
  } else if (b != nullptr) {
    for (std::int64_t i = 0; i < n; ++i) d[i] = (x[i] - mean) * rstd + b[i];
  } else {
    for (std::int64_t i = 0; i < n; ++i) d[i] = (x[i] - mean) * rstd;
  }
}

void max_accumulate(float* __restrict m, const float* __restrict x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) m[i] = x[i] > m[i] ? x[i] : m[i];
}

void exp_sub_accumulate(float* __restrict xd, const float* __restrict m, float* __restrict acc,
                        std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = exp_f32(xd[i] - m[i]);
    xd[i] = v;
    acc[i] += v;
  }
}

void mul_inplace(float* __restrict d, const float* __restrict f, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) d[i] *= f[i];
}

void scale_run(const float* __restrict x, float f, float* __restrict d, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) d[i] = x[i] * f;
}

void scale_inplace(float* d, float f, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) d[i] *= f;
}

void accumulate_f32(float* __restrict acc, const float* __restrict x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) acc[i] += x[i];
}

void accumulate4_f32(float* __restrict acc, const float* x0, const float* x1, const float* x2,
                     const float* x3, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) acc[i] += (x0[i] + x1[i]) + (x2[i] + x3[i]);
}

void accumulate_f64(double* __restrict acc, const float* __restrict x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) acc[i] += static_cast<double>(x[i]);
}

}  // namespace loops
}  // namespace

const EwLoops KA_EW_LOOPS_TABLE = {
    KA_EW_LOOPS_ISA,         &loops::unary_run,      &loops::exp_shifted_sum,
    &loops::binary_run,      &loops::exp_shifted_run, &loops::lane_sum,
    &loops::lane_max,        &loops::lane_sum_sq_dev, &loops::normalize_run,
    &loops::max_accumulate,  &loops::exp_sub_accumulate, &loops::mul_inplace,
    &loops::scale_run,       &loops::scale_inplace,  &loops::accumulate_f32,
    &loops::accumulate4_f32, &loops::accumulate_f64};

}  // namespace ka::kernels::detail
