// EwProgram builders, its reference evaluator and dump, and broadcast_view (shared by the CPU
// and CUDA element-wise kernels).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ka/core/error.hpp>
#include <ka/kernels/elementwise.hpp>
#include <ka/kernels/gemm.hpp>
#include <string>

namespace ka::kernels {
namespace {

bool is_unary(EwOp op) { return op >= EwOp::kNeg; }
bool is_binary(EwOp op) { return op >= EwOp::kAdd && op <= EwOp::kMax; }

std::string shape_of(const std::int64_t* sizes, int ndim) {
  std::string out = "[";
  for (int d = 0; d < ndim; ++d) {
    if (d != 0) out += ", ";
    out += std::to_string(sizes[d]);
  }
  return out + "]";
}

}  // namespace

const char* to_string(EwOp op) noexcept {
  switch (op) {
    case EwOp::kInput:
      return "input";
    case EwOp::kScalar:
      return "scalar";
    case EwOp::kAdd:
      return "add";
    case EwOp::kSub:
      return "sub";
    case EwOp::kMul:
      return "mul";
    case EwOp::kDiv:
      return "div";
    case EwOp::kMax:
      return "max";
    case EwOp::kNeg:
      return "neg";
    case EwOp::kExp:
      return "exp";
    case EwOp::kTanh:
      return "tanh";
    case EwOp::kRelu:
      return "relu";
    case EwOp::kGelu:
      return "gelu";
    case EwOp::kGeluTanh:
      return "gelu_tanh";
    case EwOp::kSigmoid:
      return "sigmoid";
    case EwOp::kSilu:
      return "silu";
  }
  return "?";
}

const char* to_string(Epilogue e) noexcept {
  switch (e) {
    case Epilogue::kNone:
      return "none";
    case Epilogue::kRelu:
      return "relu";
    case Epilogue::kGelu:
      return "gelu";
    case Epilogue::kGeluTanh:
      return "gelu_tanh";
    case Epilogue::kSigmoid:
      return "sigmoid";
    case Epilogue::kSilu:
      return "silu";
  }
  return "?";
}

int EwProgram::input(int index) {
  KA_CHECK(index >= 0 && index < kMaxInputs, "EwProgram: input index ", index, " outside [0, ",
           kMaxInputs, ")");
  KA_CHECK(size < kMaxInstrs && regs < kMaxRegs, "EwProgram: more than ", kMaxInstrs,
           " instructions or ", kMaxRegs, " registers");
  EwInstr& in = code[static_cast<std::size_t>(size++)];
  in = EwInstr{EwOp::kInput, static_cast<std::uint8_t>(regs), static_cast<std::uint8_t>(index), 0,
               0.0F};
  inputs = std::max(inputs, index + 1);
  return regs++;
}

int EwProgram::scalar(float value) {
  KA_CHECK(size < kMaxInstrs && regs < kMaxRegs, "EwProgram: more than ", kMaxInstrs,
           " instructions or ", kMaxRegs, " registers");
  code[static_cast<std::size_t>(size++)] =
      EwInstr{EwOp::kScalar, static_cast<std::uint8_t>(regs), 0, 0, value};
  return regs++;
}

int EwProgram::unary(EwOp op, int a) {
  KA_CHECK(is_unary(op), "EwProgram::unary: ", to_string(op), " is not a unary op");
  KA_CHECK(a >= 0 && a < regs, "EwProgram::unary: register r", a, " is not defined");
  KA_CHECK(size < kMaxInstrs && regs < kMaxRegs, "EwProgram: more than ", kMaxInstrs,
           " instructions or ", kMaxRegs, " registers");
  code[static_cast<std::size_t>(size++)] =
      EwInstr{op, static_cast<std::uint8_t>(regs), static_cast<std::uint8_t>(a), 0, 0.0F};
  return regs++;
}

int EwProgram::binary(EwOp op, int a, int b) {
  KA_CHECK(is_binary(op), "EwProgram::binary: ", to_string(op), " is not a binary op");
  KA_CHECK(a >= 0 && a < regs && b >= 0 && b < regs, "EwProgram::binary: register r", a, " or r", b,
           " is not defined");
  KA_CHECK(size < kMaxInstrs && regs < kMaxRegs, "EwProgram: more than ", kMaxInstrs,
           " instructions or ", kMaxRegs, " registers");
  code[static_cast<std::size_t>(size++)] =
      EwInstr{op, static_cast<std::uint8_t>(regs), static_cast<std::uint8_t>(a),
              static_cast<std::uint8_t>(b), 0.0F};
  return regs++;
}

float EwProgram::eval(const float* in) const noexcept {
  float r[kMaxRegs] = {};
  for (int i = 0; i < size; ++i) {
    const EwInstr& c = code[static_cast<std::size_t>(i)];
    const float a = r[c.a];
    const float b = r[c.b];
    float v = 0.0F;
    switch (c.op) {
      case EwOp::kInput:
        v = in[c.a];
        break;
      case EwOp::kScalar:
        v = c.imm;
        break;
      case EwOp::kAdd:
        v = a + b;
        break;
      case EwOp::kSub:
        v = a - b;
        break;
      case EwOp::kMul:
        v = a * b;
        break;
      case EwOp::kDiv:
        v = a / b;
        break;
      case EwOp::kMax:
        v = (std::isnan(a) || a > b) ? a : b;
        break;
      case EwOp::kNeg:
        v = -a;
        break;
      case EwOp::kExp:
        v = std::exp(a);
        break;
      case EwOp::kTanh:
        v = std::tanh(a);
        break;
      case EwOp::kRelu:
        v = a < 0.0F ? 0.0F : a;
        break;
      case EwOp::kGelu:
        v = 0.5F * a * (1.0F + std::erf(a * 0.70710678118654752F));
        break;
      case EwOp::kGeluTanh:
        v = 0.5F * a * (1.0F + std::tanh(0.79788456080286536F * (a + 0.044715F * a * a * a)));
        break;
      case EwOp::kSigmoid:
        v = 1.0F / (1.0F + std::exp(-a));
        break;
      case EwOp::kSilu:
        v = a / (1.0F + std::exp(-a));
        break;
    }
    r[c.dst] = v;
  }
  return r[result];
}

std::string EwProgram::str() const {
  std::string out;
  char buf[64];
  for (int i = 0; i < size; ++i) {
    const EwInstr& c = code[static_cast<std::size_t>(i)];
    out += "r" + std::to_string(c.dst) + "=";
    const std::string a = "r" + std::to_string(c.a);
    const std::string b = "r" + std::to_string(c.b);
    switch (c.op) {
      case EwOp::kInput:
        out += "in" + std::to_string(c.a);
        break;
      case EwOp::kScalar:
        std::snprintf(buf, sizeof buf, "%g", static_cast<double>(c.imm));
        out += buf;
        break;
      case EwOp::kAdd:
        out += a + "+" + b;
        break;
      case EwOp::kSub:
        out += a + "-" + b;
        break;
      case EwOp::kMul:
        out += a + "*" + b;
        break;
      case EwOp::kDiv:
        out += a + "/" + b;
        break;
      case EwOp::kMax:
        out += "max(" + a + "," + b + ")";
        break;
      default:
        out += std::string(to_string(c.op)) + "(" + a + ")";
        break;
    }
    out += " ";
  }
  return out + "-> r" + std::to_string(result);
}

TensorView broadcast_view(const TensorView& view, const std::int64_t* sizes, int ndim) {
  KA_CHECK(ndim >= 0 && ndim <= TensorView::kMaxDims, "broadcast_view: ", ndim,
           " dims exceed the maximum of ", TensorView::kMaxDims);
  KA_CHECK(view.ndim <= ndim, "broadcast_view: shape ", view.shape_str(),
           " cannot be broadcast to ", shape_of(sizes, ndim));
  TensorView out = view;
  out.ndim = ndim;
  const int lead = ndim - view.ndim;
  for (int d = 0; d < ndim; ++d) {
    const auto ud = static_cast<std::size_t>(d);
    out.sizes[ud] = sizes[d];
    if (d < lead) {
      out.strides[ud] = 0;
      continue;
    }
    const std::int64_t have = view.size(d - lead);
    KA_CHECK(have == sizes[d] || have == 1, "broadcast_view: shape ", view.shape_str(),
             " cannot be broadcast to ", shape_of(sizes, ndim));
    out.strides[ud] = have == sizes[d] ? view.stride(d - lead) : 0;
  }
  return out;
}

}  // namespace ka::kernels
