// The process-wide store of constant weights packed once (Note [Constant weights packed
// once] in packed_weights.cpp).
#pragma once

#include <ka/extractor/extractor.hpp>
#include <ka/kernels/gemm.hpp>
#include <ka/kernels/tensor_view.hpp>

#include <ATen/core/Tensor.h>

#include <functional>

namespace ka::extractor::detail {

/// mat2 (`view`, the data of graph constant `owner`) packed in `layout`: the floats an
/// earlier extraction packed when `owner` is the same tensor and unwritten since, else packed
/// now by `pack` (which writes layout.floats() floats). Undefined when KA_PACKED_WEIGHTS_MIB
/// leaves no room, or `owner` keeps no version count (an inference tensor): the GEMM then
/// packs on every call. Thread-safe.
at::Tensor packed_weight(const at::Tensor& owner, const kernels::TensorView& view,
                         const kernels::PackedMat2Layout& layout,
                         const std::function<void(float*)>& pack);

}  // namespace ka::extractor::detail
