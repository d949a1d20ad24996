// Conversions between libtorch tensors and ka's torch-free TensorView.
#pragma once

#include <ka/core/dtype.hpp>
#include <ka/kernels/tensor_view.hpp>

#include <ATen/core/Tensor.h>

namespace ka::extractor {

/// ka's dtype for a libtorch scalar type. Throws ka::ValueError naming the type when ka has
/// no equivalent.
DType to_dtype(c10::ScalarType type);

/// A view of `t` (no copy; `t` must outlive the view). Throws ka::ValueError for tensors with
/// more than TensorView::kMaxDims dims, without storage, or on an unsupported device/dtype.
kernels::TensorView to_view(const at::Tensor& t);

}  // namespace ka::extractor
