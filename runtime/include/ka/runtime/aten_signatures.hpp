// The exact overload names of the aten operators ka's extractor serves, as objects with
// static storage, so that code can take them as template arguments (one instantiation per
// operator, each resolving its OpHandle once): runtime/src/aten_ops.cpp (ka's dispatcher)
// and pytorch/src/served_ops.cpp (PyTorch's).
#pragma once

namespace ka::runtime::signature {

inline constexpr char kAddTensor[] = "aten::add.Tensor";
inline constexpr char kAddScalar[] = "aten::add.Scalar";
inline constexpr char kAddInplace[] = "aten::add_.Tensor";
inline constexpr char kSubTensor[] = "aten::sub.Tensor";
inline constexpr char kMulTensor[] = "aten::mul.Tensor";
inline constexpr char kMulScalar[] = "aten::mul.Scalar";
inline constexpr char kMulInplace[] = "aten::mul_.Tensor";
inline constexpr char kRelu[] = "aten::relu";
inline constexpr char kReluInplace[] = "aten::relu_";
inline constexpr char kGelu[] = "aten::gelu";
inline constexpr char kSigmoid[] = "aten::sigmoid";
inline constexpr char kSilu[] = "aten::silu";
inline constexpr char kMm[] = "aten::mm";
inline constexpr char kAddmm[] = "aten::addmm";
inline constexpr char kMmOut[] = "aten::mm.out";
inline constexpr char kAddmmOut[] = "aten::addmm.out";
inline constexpr char kBmm[] = "aten::bmm";
inline constexpr char kSoftmax[] = "aten::_softmax";
inline constexpr char kLayerNorm[] = "aten::layer_norm";
inline constexpr char kSumDim[] = "aten::sum.dim_IntList";

}  // namespace ka::runtime::signature
