// Element types of tensors, with short canonical names used in shape keys ("f32").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ka {

enum class DType : std::uint8_t { kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kBool };

/// Short canonical name: f32, f64, f16, bf16, i32, i64, b8.
std::string_view short_name(DType dtype);
/// PyTorch-style long name: float32, float64, float16, bfloat16, int32, int64, bool.
std::string_view long_name(DType dtype);
/// Accepts the short or the long name (and "float", "half"). Throws ka::ValueError otherwise.
DType parse_dtype(std::string_view text);
/// Size of one element in bytes.
std::size_t element_size(DType dtype);

}  // namespace ka
