// aten::mm and aten::addmm served by ka's CPU GEMM through ka's dispatcher.
// Until the extractor exists (issue 4) the CPU kernel calls the GEMM directly with its
// default launch configuration; afterwards it becomes "extract and execute".
#include <ka/core/error.hpp>
#include <ka/dispatch/library.hpp>
#include <ka/kernels/gemm.hpp>
#include <ka/runtime/aten_ops.hpp>
#include <ka/runtime/tensor_interop.hpp>

#include <ATen/ATen.h>

#include <memory>

namespace ka::runtime {
namespace {

at::Tensor run_gemm(const char* op, const at::Tensor* self, const at::Tensor& mat1,
                    const at::Tensor& mat2, double beta, double alpha) {
  KA_CHECK_TYPE(NotImplementedError,
                mat1.scalar_type() == at::kFloat && mat2.scalar_type() == at::kFloat &&
                    (self == nullptr || self->scalar_type() == at::kFloat),
                op, ": ka's CPU kernel ", kernels::gemm_f32_cpu_descriptor().name,
                " takes float32; got mat1 ", c10::toString(mat1.scalar_type()), ", mat2 ",
                c10::toString(mat2.scalar_type()));
  KA_CHECK(mat1.dim() == 2 && mat2.dim() == 2, op, ": expected matrices, got shapes ",
           mat1.sizes(), " and ", mat2.sizes());
  at::Tensor out = at::empty({mat1.size(0), mat2.size(1)}, mat1.options());
  kernels::AddmmArgs args;
  args.out = to_view(out);
  args.mat1 = to_view(mat1);
  args.mat2 = to_view(mat2);
  if (self != nullptr) args.self = to_view(*self);
  args.beta = static_cast<float>(beta);
  args.alpha = static_cast<float>(alpha);
  const auto& d = kernels::gemm_f32_cpu_descriptor();
  const ShapeKey key = kernels::addmm_shape_key(mat1.size(0), mat1.size(1), mat2.size(1),
                                                self != nullptr);
  const Status st = kernels::gemm_f32_cpu(args, d.default_config(key));
  KA_CHECK_TYPE(NotImplementedError, st.is_ok(), op, ": ", d.name, " cannot run ", key.str(),
                ": ", st.reason());
  return out;
}

at::Tensor mm_cpu(const at::Tensor& self, const at::Tensor& mat2) {
  return run_gemm("aten::mm", nullptr, self, mat2, 0.0, 1.0);
}

at::Tensor addmm_cpu(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                     const at::Scalar& beta, const at::Scalar& alpha) {
  return run_gemm("aten::addmm", &self, mat1, mat2, beta.toDouble(), alpha.toDouble());
}

struct Registrations {
  std::vector<std::string> ops{"aten::addmm", "aten::mm"};
  dispatch::Library defs{dispatch::Library::Kind::kFragment, "aten", std::nullopt,
                         "registered at runtime/src/aten_ops.cpp"};
  dispatch::Library cpu{dispatch::Library::Kind::kImpl, "aten", dispatch::DispatchKey::CPU,
                        "registered at runtime/src/aten_ops.cpp"};

  Registrations() {
    defs.def("aten::mm(Tensor self, Tensor mat2) -> Tensor");
    defs.def(
        "aten::addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) "
        "-> Tensor");
    const std::string kernel = kernels::gemm_f32_cpu_descriptor().name;
    cpu.impl("mm", dispatch::KernelFunction::from_unboxed(&mm_cpu, "ka " + kernel + " (mm)"));
    cpu.impl("addmm",
             dispatch::KernelFunction::from_unboxed(&addmm_cpu, "ka " + kernel + " (addmm)"));
  }
};

}  // namespace

const std::vector<std::string>& register_aten_ops() {
  // Never destroyed: kernels stay registered for the whole process, including static
  // destructors of other objects that may still dispatch.
  static const Registrations* registrations = new Registrations();
  return registrations->ops;
}

}  // namespace ka::runtime
