// A TensorView of a float32 (or bfloat16) CPU at::Tensor, for kernel tests (no copy; `t` must
// outlive it). An undefined tensor gives the "absent" view (null data, 0 dims), as kernels
// expect for optional arguments. `device` labels it: the host-emulated CUDA kernels' tests
// pass Device::cuda() (what the launch plans check) over host memory (what they read).
#pragma once

#include <ka/kernels/tensor_view.hpp>

#include <ATen/core/Tensor.h>

#include <cstddef>

namespace ka::test {

inline kernels::TensorView view_of(const at::Tensor& t, Device device = Device::cpu()) {
  kernels::TensorView v;
  v.data = t.defined() ? t.data_ptr() : nullptr;
  v.dtype = t.defined() && t.scalar_type() == at::kBFloat16 ? DType::kBFloat16 : DType::kFloat32;
  v.device = device;
  v.ndim = t.defined() ? static_cast<int>(t.dim()) : 0;
  for (int d = 0; d < v.ndim; ++d) {
    v.sizes[static_cast<std::size_t>(d)] = t.size(d);
    v.strides[static_cast<std::size_t>(d)] = t.stride(d);
  }
  return v;
}

}  // namespace ka::test
