// ka's operators in ka's dispatcher: every CPU (and CUDA) kernel is "extract and execute".
#include <ka/core/error.hpp>
#include <ka/dispatch/library.hpp>
#include <ka/extractor/extractor.hpp>
#include <ka/kernels/gemm.hpp>
#include <ka/runtime/aten_ops.hpp>
#include <ka/runtime/aten_signatures.hpp>

#include <ATen/ATen.h>

#include <array>
#include <memory>

namespace ka::runtime {
namespace {

using dispatch::KernelFunction;
using dispatch::Library;

// Note [Extract and execute]
// The backend kernel of every op ka serves boxes its arguments into a small on-stack IValue
// array (reference-count bumps, no heap) and hands them to the extractor, which validates,
// looks up the kernel for the inputs' device, packs, picks the config and runs the task
// before returning. The handle is resolved once per op (a function-local static).
// Args are the C++ types of PyTorch's unboxed signature (const at::Tensor&, const at::Scalar&,
// int64_t, ...), so typed calls look like c10's.
template <const char* Signature, class... Args>
at::Tensor extract_execute(Args... args) {
  static const extractor::OpHandle handle = extractor::Extractor::global().resolve(Signature);
  std::array<c10::IValue, sizeof...(Args)> stack{c10::IValue(args)...};
  return extractor::Extractor::global().call(handle, stack.data(), stack.size()).toTensor();
}

using namespace signature;  // kMm, kAddmm, ...: the operators' names

using T = const at::Tensor&;
using S = const at::Scalar&;
using OptT = const c10::optional<at::Tensor>&;
using OptDims = c10::optional<std::vector<std::int64_t>>;
using OptType = c10::optional<at::ScalarType>;

// CompositeImplicitAutograd kernels: they decompose through ka's dispatcher, as PyTorch's do.
at::Tensor linear_composite(T input, T weight, OptT bias) {
  auto& d = dispatch::Dispatcher::singleton();
  static const auto addmm = d.find_op_or_throw("aten::addmm").typed<at::Tensor(T, T, T, S, S)>();
  static const auto mm = d.find_op_or_throw("aten::mm").typed<at::Tensor(T, T)>();
  KA_CHECK(input.dim() >= 1 && weight.dim() == 2, "aten::linear: expected input of >= 1 dims "
           "and a 2-D weight, got ", input.sizes(), " and ", weight.sizes());
  const at::Tensor w_t = weight.t();
  const bool has_bias = bias.has_value() && bias->defined();
  if (input.dim() == 2) {
    return has_bias ? addmm.call(*bias, input, w_t, 1, 1) : mm.call(input, w_t);
  }
  const at::Tensor flat = input.reshape({-1, input.size(-1)});
  at::Tensor out = has_bias ? addmm.call(*bias, flat, w_t, 1, 1) : mm.call(flat, w_t);
  std::vector<std::int64_t> shape(input.sizes().begin(), input.sizes().end());
  shape.back() = weight.size(0);
  return out.view(shape);
}

at::Tensor softmax_int_composite(T self, std::int64_t dim, OptType dtype) {
  static const auto softmax = dispatch::Dispatcher::singleton()
                                  .find_op_or_throw("aten::_softmax")
                                  .typed<at::Tensor(T, std::int64_t, bool)>();
  KA_CHECK_TYPE(NotImplementedError, !dtype.has_value() || *dtype == at::kFloat,
                "aten::softmax.int: ka's kernels take float32; dtype=", c10::toString(*dtype));
  return softmax.call(self, dim, false);
}

struct Registrations {
  std::vector<std::string> ops;
  Library defs{Library::Kind::kFragment, "aten", std::nullopt,
               "registered at runtime/src/aten_ops.cpp"};
  Library cpu{Library::Kind::kImpl, "aten", dispatch::DispatchKey::CPU,
              "registered at runtime/src/aten_ops.cpp"};
  Library cuda{Library::Kind::kImpl, "aten", dispatch::DispatchKey::CUDA,
               "registered at runtime/src/aten_ops.cpp"};
  Library composite{Library::Kind::kImpl, "aten",
                    dispatch::DispatchKey::CompositeImplicitAutograd,
                    "registered at runtime/src/aten_ops.cpp"};

  template <class Fn>
  void backend(const char* schema, const char* signature, Fn* fn) {
    defs.def(schema);
    const std::string name = std::string(signature).substr(6);  // drop "aten::"
    const std::string debug = std::string("ka extract+execute (") + signature + ")";
    cpu.impl(name, KernelFunction::from_unboxed(fn, debug));
    if (kernels::cuda_compiled()) cuda.impl(name, KernelFunction::from_unboxed(fn, debug));
    ops.emplace_back(signature);
  }

  Registrations() {
    backend("aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", kAddTensor,
            &extract_execute<kAddTensor, T, T, S>);
    backend("aten::add.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor", kAddScalar,
            &extract_execute<kAddScalar, T, S, S>);
    backend("aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)",
            kAddInplace, &extract_execute<kAddInplace, T, T, S>);
    backend("aten::sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", kSubTensor,
            &extract_execute<kSubTensor, T, T, S>);
    backend("aten::mul.Tensor(Tensor self, Tensor other) -> Tensor", kMulTensor,
            &extract_execute<kMulTensor, T, T>);
    backend("aten::mul.Scalar(Tensor self, Scalar other) -> Tensor", kMulScalar,
            &extract_execute<kMulScalar, T, S>);
    backend("aten::mul_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)", kMulInplace,
            &extract_execute<kMulInplace, T, T>);
    backend("aten::relu(Tensor self) -> Tensor", kRelu, &extract_execute<kRelu, T>);
    backend("aten::relu_(Tensor(a!) self) -> Tensor(a!)", kReluInplace,
            &extract_execute<kReluInplace, T>);
    backend("aten::gelu(Tensor self, *, str approximate='none') -> Tensor", kGelu,
            &extract_execute<kGelu, T, c10::string_view>);
    backend("aten::sigmoid(Tensor self) -> Tensor", kSigmoid,
            &extract_execute<kSigmoid, T>);
    backend("aten::silu(Tensor self) -> Tensor", kSilu, &extract_execute<kSilu, T>);
    backend("aten::mm(Tensor self, Tensor mat2) -> Tensor", kMm,
            &extract_execute<kMm, T, T>);
    backend("aten::addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) "
            "-> Tensor",
            kAddmm, &extract_execute<kAddmm, T, T, T, S, S>);
    // The out= overloads write the caller's tensor, as at::mm_out / at::addmm_out do. In
    // PyTorch `out` is a Tensor&; ka's typed signature takes it as const at::Tensor& (the
    // handle is const, the data it points to is written).
    backend("aten::mm.out(Tensor self, Tensor mat2, *, Tensor(a!) out) -> Tensor(a!)", kMmOut,
            &extract_execute<kMmOut, T, T, T>);
    backend("aten::addmm.out(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, "
            "Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)",
            kAddmmOut, &extract_execute<kAddmmOut, T, T, T, S, S, T>);
    backend("aten::bmm(Tensor self, Tensor mat2) -> Tensor", kBmm,
            &extract_execute<kBmm, T, T>);
    backend("aten::_softmax(Tensor self, int dim, bool half_to_float) -> Tensor", kSoftmax,
            &extract_execute<kSoftmax, T, std::int64_t, bool>);
    backend("aten::layer_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, "
            "Tensor? bias=None, float eps=1e-05, bool cudnn_enable=True) -> Tensor",
            kLayerNorm,
            &extract_execute<kLayerNorm, T, std::vector<std::int64_t>,
                             OptT, OptT, double, bool>);
    backend("aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, "
            "ScalarType? dtype=None) -> Tensor",
            kSumDim, &extract_execute<kSumDim, T, OptDims, bool, OptType>);

    defs.def("aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor");
    composite.impl("linear", KernelFunction::from_unboxed(
                                 &linear_composite, "ka linear → addmm/mm (decomposes)"));
    ops.emplace_back("aten::linear");
    defs.def("aten::softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor");
    composite.impl("softmax.int", KernelFunction::from_unboxed(&softmax_int_composite,
                                                               "ka softmax.int → _softmax"));
    ops.emplace_back("aten::softmax.int");
    std::sort(ops.begin(), ops.end());
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
