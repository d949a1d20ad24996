// TensorView: a torch-free view of a tensor (data pointer, sizes, strides, dtype, device).
#pragma once

#include <ka/core/device.hpp>
#include <ka/core/dtype.hpp>
#include <ka/core/error.hpp>

#include <array>
#include <cstdint>
#include <initializer_list>

namespace ka::kernels {

/// What a kernel sees of a tensor. Strides are in elements. Holds no ownership: the caller
/// keeps the storage alive while a kernel runs.
struct TensorView {
  static constexpr int kMaxDims = 8;

  void* data = nullptr;
  DType dtype = DType::kFloat32;
  Device device;
  int ndim = 0;
  std::array<std::int64_t, kMaxDims> sizes{};
  std::array<std::int64_t, kMaxDims> strides{};

  /// A view with the given sizes and strides. Throws ka::ValueError for more than kMaxDims dims
  /// or mismatched lengths.
  static TensorView make(void* data, DType dtype, Device device,
                         std::initializer_list<std::int64_t> sizes,
                         std::initializer_list<std::int64_t> strides);
  /// A contiguous (row-major) view.
  static TensorView contiguous(void* data, DType dtype, Device device,
                               std::initializer_list<std::int64_t> sizes);

  [[nodiscard]] bool defined() const noexcept { return data != nullptr || numel() == 0; }
  [[nodiscard]] std::int64_t size(int dim) const noexcept { return sizes[static_cast<std::size_t>(dim)]; }
  [[nodiscard]] std::int64_t stride(int dim) const noexcept {
    return strides[static_cast<std::size_t>(dim)];
  }
  [[nodiscard]] std::int64_t numel() const noexcept {
    std::int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= size(d);
    return n;
  }
  /// True for row-major dense layout (size-1 dims may have any stride, as in PyTorch).
  [[nodiscard]] bool is_contiguous() const noexcept {
    std::int64_t expected = 1;
    for (int d = ndim - 1; d >= 0; --d) {
      if (size(d) != 1 && stride(d) != expected) return false;
      expected *= size(d);
    }
    return true;
  }
  /// True for a matrix laid out as the transpose of a contiguous one (column-major: strides
  /// (1, rows)) that is not also contiguous: nn.Linear's weight as the GEMM's B.
  [[nodiscard]] bool is_transposed() const noexcept {
    return ndim == 2 && size(0) > 1 && size(1) > 1 && stride(0) == 1 && stride(1) == size(0);
  }
  template <typename T>
  [[nodiscard]] T* data_as() const noexcept {
    return static_cast<T*>(data);
  }
  /// "[2, 3]" for error messages.
  [[nodiscard]] std::string shape_str() const;
};

}  // namespace ka::kernels
