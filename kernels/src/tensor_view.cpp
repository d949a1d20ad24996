#include <ka/kernels/tensor_view.hpp>

namespace ka::kernels {

TensorView TensorView::make(void* data, DType dtype, Device device,
                            std::initializer_list<std::int64_t> sizes,
                            std::initializer_list<std::int64_t> strides) {
  KA_CHECK(sizes.size() == strides.size(), "TensorView: ", sizes.size(), " sizes but ",
           strides.size(), " strides");
  KA_CHECK(sizes.size() <= static_cast<std::size_t>(kMaxDims), "TensorView: ", sizes.size(),
           " dims exceed the maximum of ", kMaxDims);
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.ndim = static_cast<int>(sizes.size());
  std::size_t i = 0;
  for (const auto s : sizes) {
    KA_CHECK(s >= 0, "TensorView: negative size ", s);
    v.sizes[i++] = s;
  }
  i = 0;
  for (const auto s : strides) v.strides[i++] = s;
  return v;
}

TensorView TensorView::contiguous(void* data, DType dtype, Device device,
                                  std::initializer_list<std::int64_t> sizes) {
  TensorView v = make(data, dtype, device, sizes, sizes);  // strides filled below
  std::int64_t stride = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    v.strides[static_cast<std::size_t>(d)] = stride;
    stride *= v.size(d);
  }
  return v;
}

std::string TensorView::shape_str() const {
  std::string out = "[";
  for (int d = 0; d < ndim; ++d) {
    if (d != 0) out += ", ";
    out += std::to_string(size(d));
  }
  return out + "]";
}

}  // namespace ka::kernels
