// ShapeKey: the operator signature plus dtype, sizes and contiguity of every tensor argument.
#pragma once

#include <ka/core/dtype.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ka {

/// One tensor argument as a shape key sees it.
struct TensorSpec {
  DType dtype = DType::kFloat32;
  std::vector<std::int64_t> sizes;
  bool contiguous = true;
  /// A 2-D tensor laid out as the transpose of a contiguous one (strides (1, rows)), as the
  /// weight of nn.Linear reaches a GEMM; never also contiguous.
  bool transposed = false;

  friend bool operator==(const TensorSpec& a, const TensorSpec& b) {
    return a.dtype == b.dtype && a.sizes == b.sizes && a.contiguous == b.contiguous &&
           a.transposed == b.transposed;
  }
  friend bool operator!=(const TensorSpec& a, const TensorSpec& b) { return !(a == b); }
};

/// The key under which trials and recommendations are stored: the exact operator overload
/// name (`aten::addmm`, `aten::add.Tensor`) and every tensor argument in schema order.
///
/// Canonical text form, which parse() turns back into an equal value:
///   aten::addmm(f32[3072]c,f32[512,768]c,f32[768,3072]s)
/// (`c` contiguous, `t` the transpose of a contiguous matrix, `s` otherwise strided; a 0-d
/// tensor is `f32[]c`).
class ShapeKey {
 public:
  ShapeKey() = default;
  /// Throws ka::ValueError when `op` is not of the form ns::name[.overload].
  ShapeKey(std::string op, std::vector<TensorSpec> args);

  [[nodiscard]] const std::string& op() const noexcept { return op_; }
  [[nodiscard]] const std::vector<TensorSpec>& args() const noexcept { return args_; }
  /// Canonical text form (see the class comment).
  [[nodiscard]] const std::string& str() const noexcept { return text_; }
  /// Stable 64-bit hash of the canonical form (FNV-1a): equal on every machine.
  [[nodiscard]] std::uint64_t hash() const noexcept { return hash_; }

  /// Parses the canonical form. Throws ka::ValueError naming the bad part.
  static ShapeKey parse(std::string_view text);

  friend bool operator==(const ShapeKey& a, const ShapeKey& b) { return a.text_ == b.text_; }
  friend bool operator!=(const ShapeKey& a, const ShapeKey& b) { return !(a == b); }

 private:
  std::string op_;
  std::vector<TensorSpec> args_;
  std::string text_;
  std::uint64_t hash_ = 0;
};

}  // namespace ka
