// Every unary EwOp with its ATen reference, for the CPU and CUDA element-wise kernel tests.
#pragma once

#include <ka/kernels/elementwise.hpp>

#include <ATen/ATen.h>

#include <vector>

namespace ka::test {

struct UnaryReference {
  kernels::EwOp op;
  at::Tensor (*reference)(const at::Tensor&);
};

/// neg, exp, tanh, relu, gelu (erf and tanh forms), sigmoid, silu.
inline const std::vector<UnaryReference>& unary_references() {
  using kernels::EwOp;
  static const std::vector<UnaryReference> ops = {
      {EwOp::kNeg, [](const at::Tensor& t) { return at::neg(t); }},
      {EwOp::kExp, [](const at::Tensor& t) { return at::exp(t); }},
      {EwOp::kTanh, [](const at::Tensor& t) { return at::tanh(t); }},
      {EwOp::kRelu, [](const at::Tensor& t) { return at::relu(t); }},
      {EwOp::kGelu, [](const at::Tensor& t) { return at::gelu(t); }},
      {EwOp::kGeluTanh, [](const at::Tensor& t) { return at::gelu(t, "tanh"); }},
      {EwOp::kSigmoid, [](const at::Tensor& t) { return at::sigmoid(t); }},
      {EwOp::kSilu, [](const at::Tensor& t) { return at::silu(t); }},
  };
  return ops;
}

}  // namespace ka::test
