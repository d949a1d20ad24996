// Shape handling shared by the CPU and CUDA GEMMs.
#include <ka/core/error.hpp>
#include <ka/kernels/detail/gemm_operands.hpp>

namespace ka::kernels {
namespace detail {

GemmShape validate_addmm(const AddmmArgs& args, DeviceType expected_device) {
  const TensorView* named[] = {&args.out, &args.mat1, &args.mat2};
  const char* names[] = {"out", "mat1", "mat2"};
  for (int i = 0; i < 3; ++i) {
    const TensorView& t = *named[i];
    KA_CHECK(t.dtype == DType::kFloat32, "addmm: ", names[i], " has dtype ", long_name(t.dtype),
             "; this kernel takes float32");
    KA_CHECK(t.device.type == expected_device, "addmm: ", names[i], " is on ", t.device.str(),
             "; this kernel runs on ", to_string(expected_device));
  }
  KA_CHECK(args.mat1.ndim == 2, "addmm: mat1 must be a matrix, got shape ", args.mat1.shape_str());
  KA_CHECK(args.mat2.ndim == 2, "addmm: mat2 must be a matrix, got shape ", args.mat2.shape_str());
  const GemmShape s{args.mat1.size(0), args.mat2.size(1), args.mat1.size(1)};
  KA_CHECK(args.mat2.size(0) == s.k, "addmm: mat1 and mat2 shapes cannot be multiplied (",
           s.m, "x", s.k, " and ", args.mat2.size(0), "x", s.n, ")");
  KA_CHECK(args.out.ndim == 2 && args.out.size(0) == s.m && args.out.size(1) == s.n,
           "addmm: out has shape ", args.out.shape_str(), ", expected [", s.m, ", ", s.n, "]");
  KA_CHECK(args.out.stride(1) == 1 || s.n <= 1, "addmm: out must have unit column stride, got ",
           "strides [", args.out.stride(0), ", ", args.out.stride(1), "]");
  if (args.self.ndim > 0 || args.self.data != nullptr) {
    const TensorView& b = args.self;
    KA_CHECK(b.dtype == DType::kFloat32, "addmm: self has dtype ", long_name(b.dtype),
             "; this kernel takes float32");
    KA_CHECK(b.device.type == expected_device, "addmm: self is on ", b.device.str(),
             "; this kernel runs on ", to_string(expected_device));
    bool ok = b.ndim <= 2;
    if (b.ndim == 1) ok = b.size(0) == s.n || b.size(0) == 1;
    if (b.ndim == 2) {
      ok = (b.size(0) == s.m || b.size(0) == 1) && (b.size(1) == s.n || b.size(1) == 1);
    }
    KA_CHECK(ok, "addmm: self of shape ", b.shape_str(), " cannot be broadcast to [", s.m, ", ",
             s.n, "]");
  }
  return s;
}

BiasView broadcast_bias(const AddmmArgs& args, std::int64_t m, std::int64_t n) {
  const TensorView& b = args.self;
  BiasView v;
  if (args.beta == 0.0F || (b.ndim == 0 && b.data == nullptr)) {
    return v;
  }
  v.data = b.data_as<const float>();
  if (b.ndim == 1) {
    v.col_stride = (b.size(0) == 1 || n == 1) ? 0 : b.stride(0);
  } else if (b.ndim == 2) {
    v.row_stride = (b.size(0) == 1 || m == 1) ? 0 : b.stride(0);
    v.col_stride = (b.size(1) == 1 || n == 1) ? 0 : b.stride(1);
  }
  return v;
}

BmmShape validate_bmm(const BmmArgs& args, DeviceType expected_device) {
  const TensorView* named[] = {&args.out, &args.mat1, &args.mat2};
  const char* names[] = {"out", "mat1", "mat2"};
  for (int i = 0; i < 3; ++i) {
    const TensorView& t = *named[i];
    KA_CHECK(t.dtype == DType::kFloat32, "bmm: ", names[i], " has dtype ", long_name(t.dtype),
             "; this kernel takes float32");
    KA_CHECK(t.device.type == expected_device, "bmm: ", names[i], " is on ", t.device.str(),
             "; this kernel runs on ", to_string(expected_device));
    KA_CHECK(t.ndim == 3, "bmm: ", names[i], " must be 3-D, got shape ", t.shape_str());
  }
  const BmmShape s{args.mat1.size(0), {args.mat1.size(1), args.mat2.size(2), args.mat1.size(2)}};
  KA_CHECK(args.mat2.size(0) == s.batch && args.mat2.size(1) == s.gemm.k,
           "bmm: mat1 and mat2 shapes cannot be multiplied (", args.mat1.shape_str(), " and ",
           args.mat2.shape_str(), ")");
  KA_CHECK(args.out.size(0) == s.batch && args.out.size(1) == s.gemm.m &&
               args.out.size(2) == s.gemm.n,
           "bmm: out has shape ", args.out.shape_str(), ", expected [", s.batch, ", ", s.gemm.m,
           ", ", s.gemm.n, "]");
  return s;
}

BmmShape bmm_shape(const ShapeKey& key) {
  KA_CHECK(key.op() == "aten::bmm" && key.args().size() == 2, "shape key ", key.str(),
           " is not a batched GEMM (aten::bmm with 2 tensors)");
  const TensorSpec& a = key.args()[0];
  const TensorSpec& b = key.args()[1];
  KA_CHECK(a.sizes.size() == 3 && b.sizes.size() == 3 && a.sizes[0] == b.sizes[0] &&
               a.sizes[2] == b.sizes[1],
           "shape key ", key.str(), ": mat1 and mat2 are not multipliable batches of matrices");
  return {a.sizes[0], {a.sizes[1], b.sizes[2], a.sizes[2]}};
}

}  // namespace detail

GemmShape gemm_shape(const ShapeKey& key) {
  const auto& args = key.args();
  std::size_t first = 0;
  if (key.op() == "aten::addmm") {
    KA_CHECK(args.size() == 3, "shape key ", key.str(), ": aten::addmm takes 3 tensors");
    first = 1;
  } else {
    KA_CHECK(key.op() == "aten::mm", "shape key ", key.str(), " is not a GEMM (aten::mm/addmm)");
    KA_CHECK(args.size() == 2, "shape key ", key.str(), ": aten::mm takes 2 tensors");
  }
  const TensorSpec& a = args[first];
  const TensorSpec& b = args[first + 1];
  KA_CHECK(a.sizes.size() == 2 && b.sizes.size() == 2 && a.sizes[1] == b.sizes[0],
           "shape key ", key.str(), ": mat1 and mat2 are not multipliable matrices");
  return {a.sizes[0], b.sizes[1], a.sizes[1]};
}

ShapeKey addmm_shape_key(std::int64_t m, std::int64_t k, std::int64_t n, bool with_bias) {
  std::vector<TensorSpec> args;
  if (with_bias) args.push_back({DType::kFloat32, {n}, true});
  args.push_back({DType::kFloat32, {m, k}, true});
  args.push_back({DType::kFloat32, {k, n}, true});
  return ShapeKey(with_bias ? "aten::addmm" : "aten::mm", std::move(args));
}

}  // namespace ka::kernels
