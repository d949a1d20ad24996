#include <ka/core/error.hpp>
#include <ka/extractor/tensor_interop.hpp>

namespace ka::extractor {

DType to_dtype(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float:
      return DType::kFloat32;
    case c10::ScalarType::Double:
      return DType::kFloat64;
    case c10::ScalarType::Half:
      return DType::kFloat16;
    case c10::ScalarType::BFloat16:
      return DType::kBFloat16;
    case c10::ScalarType::Int:
      return DType::kInt32;
    case c10::ScalarType::Long:
      return DType::kInt64;
    case c10::ScalarType::Bool:
      return DType::kBool;
    default:
      KA_THROW(ValueError, "ka has no dtype for libtorch's ", c10::toString(type));
  }
}

kernels::TensorView to_view(const at::Tensor& t) {
  KA_CHECK(t.defined(), "undefined tensor where ka needs one");
  KA_CHECK(t.dim() <= kernels::TensorView::kMaxDims, "tensor of ", t.dim(),
           " dims exceeds ka's maximum of ", kernels::TensorView::kMaxDims);
  kernels::TensorView v;
  v.data = t.data_ptr();
  v.dtype = to_dtype(t.scalar_type());
  const auto& d = t.device();
  if (d.is_cpu()) {
    v.device = Device::cpu();
  } else if (d.is_cuda()) {
    v.device = Device::cuda(d.index());
  } else {
    KA_THROW(ValueError, "tensor on device '", d.str(), "' has no ka backend");
  }
  v.ndim = static_cast<int>(t.dim());
  for (int i = 0; i < v.ndim; ++i) {
    v.sizes[static_cast<std::size_t>(i)] = t.size(i);
    v.strides[static_cast<std::size_t>(i)] = t.stride(i);
  }
  return v;
}

}  // namespace ka::extractor
