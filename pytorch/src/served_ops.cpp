// Each served operator is the same two steps: try ka's pipeline (Extractor::call with the
// schema's arguments), and on refusal call libtorch's CPU kernel for it directly
// (at::cpu::<op>, which does not go back through the dispatcher, so no call can loop).
#include "served_ops.hpp"

#include "call_log.hpp"

#include <ka/core/error.hpp>
#include <ka/extractor/extractor.hpp>
#include <ka/kernels/cpu_launch.hpp>
#include <ka/runtime/aten_signatures.hpp>

#include <ATen/ATen.h>
#include <ATen/CPUFunctions.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/layer_norm_native.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>

#include <array>
#include <atomic>
#include <optional>

namespace ka::pytorch::detail {
namespace {

using T = const at::Tensor&;
using S = const at::Scalar&;

using namespace runtime::signature;  // kMm, kAddmm, ...: the operators' names

// Note [Thread count]
// ka runs on as many threads as libtorch would (at::get_num_threads(), which
// torch.set_num_threads changes), so that an enabled program is compared with itself. The
// extractor caches configs chosen for a thread limit; a change drops them (set_table). Inside
// one of libtorch's parallel regions get_num_threads() says 1 for that region only: ka keeps
// its limit there rather than drop every cached config twice per region.
void follow_torch_threads() {
  static std::atomic<int> followed{0};
  if (at::in_parallel_region()) return;
  const int threads = at::get_num_threads();
  if (followed.load(std::memory_order_relaxed) == threads) return;
  kernels::set_cpu_thread_limit(threads);
  auto& ex = extractor::Extractor::global();
  ex.set_table(ex.table());
  followed.store(threads, std::memory_order_relaxed);
}

// What a served operator asks of its tensors beyond float32 on the CPU.
enum class Layout : bool { kAny, kContiguous };
enum class Writes : bool { kResult, kSelf };

// Why ka does not try these arguments, or nullptr: its CPU kernels take plain float32 tensors
// on the CPU (no lazy negation or conjugation bit). Element-wise operators also need
// contiguous tensors: libtorch's output keeps the inputs' layout (TensorIterator), ka's is
// contiguous, and the two must not differ. An in-place operator whose other inputs partly
// overlap self is left to libtorch, which defines (or refuses) that case.
const char* precheck(const c10::IValue* args, std::size_t n, Layout layout, Writes writes) {
  for (std::size_t i = 0; i < n; ++i) {
    if (!args[i].isTensor()) continue;
    const at::Tensor& t = args[i].toTensor();
    if (!t.defined()) continue;
    if (t.device().type() != c10::DeviceType::CPU) return "not a CPU tensor";
    if (t.scalar_type() != at::kFloat) return "not float32";
    if (t.layout() != c10::kStrided) return "not a strided tensor";
    if (t.is_neg() || t.is_conj()) return "a lazily negated or conjugated view";
    if (layout == Layout::kContiguous && !t.is_contiguous()) {
      return "a non-contiguous input (libtorch keeps its layout)";
    }
    if (writes == Writes::kSelf && i > 0) {
      const at::MemOverlapStatus o = at::get_overlap_status(args[0].toTensor(), t);
      if (o == at::MemOverlapStatus::Partial || o == at::MemOverlapStatus::TooHard) {
        return "an input that partly overlaps the tensor written in place";
      }
    }
  }
  return nullptr;
}

// Runs `Signature` on ka's pipeline; nullopt (logged with the reason) when ka does not take
// the call. Errors of ka's are refusals here, not failures: libtorch's kernel then runs and
// raises its own error if the call is wrong.
template <const char* Signature, Layout L = Layout::kAny, Writes W = Writes::kResult,
          class... Args>
std::optional<at::Tensor> try_ka(const Args&... args) {
  const std::array<c10::IValue, sizeof...(Args)> stack{c10::IValue(args)...};
  if (const char* why = precheck(stack.data(), stack.size(), L, W)) {
    record_fallback(Signature, stack.data(), stack.size(), why);
    return std::nullopt;
  }
  runtime_with_table();
  static const extractor::OpHandle handle = extractor::Extractor::global().resolve(Signature);
  follow_torch_threads();
  try {
    at::Tensor out =
        extractor::Extractor::global().call(handle, stack.data(), stack.size()).toTensor();
    record_ka_call(Signature, stack.data(), stack.size());
    return out;
  } catch (const Error& e) {
    record_fallback(Signature, stack.data(), stack.size(), e.what());
    return std::nullopt;
  }
}

// A Python number in a tensor expression (`x * 0.5`) arrives as a 0-dim "wrapped number"
// tensor of dtype double or int64; it does not change the result's dtype, so ka's scalar
// overloads take it.
std::optional<at::Scalar> wrapped_number(T t) {
  if (!t.defined() || !t.unsafeGetTensorImpl()->is_wrapped_number()) return std::nullopt;
  if (t.scalar_type() != at::kDouble && t.scalar_type() != at::kLong) return std::nullopt;
  return t.item();
}

// The served operators, in a namespace of their own so that calls between them are
// qualified (at::mm and friends would otherwise be found by argument-dependent lookup).
namespace served {

// ---- GEMMs ---------------------------------------------------------------------------------

at::Tensor mm(T self, T mat2) {
  if (auto r = try_ka<kMm>(self, mat2)) return *std::move(r);
  return at::cpu::mm(self, mat2);
}
at::Tensor& mm_out(T self, T mat2, at::Tensor& out) {
  if (try_ka<kMmOut>(self, mat2, out)) return out;
  return at::cpu::mm_out(out, self, mat2);
}
at::Tensor addmm(T self, T mat1, T mat2, S beta, S alpha) {
  if (auto r = try_ka<kAddmm>(self, mat1, mat2, beta, alpha)) return *std::move(r);
  return at::cpu::addmm(self, mat1, mat2, beta, alpha);
}
at::Tensor& addmm_out(T self, T mat1, T mat2, S beta, S alpha, at::Tensor& out) {
  if (try_ka<kAddmmOut>(self, mat1, mat2, beta, alpha, out)) return out;
  return at::cpu::addmm_out(out, self, mat1, mat2, beta, alpha);
}
at::Tensor bmm(T self, T mat2) {
  if (auto r = try_ka<kBmm>(self, mat2)) return *std::move(r);
  return at::cpu::bmm(self, mat2);
}

// ---- rows and reductions -------------------------------------------------------------------

at::Tensor softmax_(T self, std::int64_t dim, bool half_to_float) {
  if (auto r = try_ka<kSoftmax>(self, dim, half_to_float)) return *std::move(r);
  return at::cpu::_softmax(self, dim, half_to_float);
}
at::Tensor sum_dim(T self, at::OptionalIntArrayRef dim, bool keepdim,
                   c10::optional<at::ScalarType> dtype) {
  const c10::optional<std::vector<std::int64_t>> dims =
      dim.has_value() ? c10::make_optional(dim->vec()) : c10::nullopt;
  if (auto r = try_ka<kSumDim, Layout::kContiguous>(self, dims, keepdim, dtype)) {
    return *std::move(r);
  }
  return at::cpu::sum(self, dim, keepdim, dtype);
}

// ---- elementwise ---------------------------------------------------------------------------

at::Tensor gelu(T self, c10::string_view approximate) {
  const std::string approx(approximate);
  if (auto r = try_ka<kGelu, Layout::kContiguous>(self, approx)) return *std::move(r);
  return at::cpu::gelu(self, approximate);
}
at::Tensor relu(T self) {
  if (auto r = try_ka<kRelu, Layout::kContiguous>(self)) return *std::move(r);
  return at::cpu::relu(self);
}
at::Tensor& relu_(at::Tensor& self) {
  if (try_ka<kReluInplace, Layout::kContiguous, Writes::kSelf>(self)) return self;
  return at::cpu::relu_(self);
}
at::Tensor sigmoid(T self) {
  if (auto r = try_ka<kSigmoid, Layout::kContiguous>(self)) return *std::move(r);
  return at::cpu::sigmoid(self);
}
at::Tensor silu(T self) {
  if (auto r = try_ka<kSilu, Layout::kContiguous>(self)) return *std::move(r);
  return at::cpu::silu(self);
}
at::Tensor add(T self, T other, S alpha) {
  if (const auto number = wrapped_number(other)) {
    if (auto r = try_ka<kAddScalar, Layout::kContiguous>(self, *number, alpha)) {
      return *std::move(r);
    }
  } else if (auto r = try_ka<kAddTensor, Layout::kContiguous>(self, other, alpha)) {
    return *std::move(r);
  }
  return at::cpu::add(self, other, alpha);
}
at::Tensor& add_(at::Tensor& self, T other, S alpha) {
  if (try_ka<kAddInplace, Layout::kContiguous, Writes::kSelf>(self, other, alpha)) return self;
  return at::cpu::add_(self, other, alpha);
}
at::Tensor sub(T self, T other, S alpha) {
  if (auto r = try_ka<kSubTensor, Layout::kContiguous>(self, other, alpha)) return *std::move(r);
  return at::cpu::sub(self, other, alpha);
}
at::Tensor mul(T self, T other) {
  if (const auto number = wrapped_number(other)) {
    if (auto r = try_ka<kMulScalar, Layout::kContiguous>(self, *number)) return *std::move(r);
  } else if (auto r = try_ka<kMulTensor, Layout::kContiguous>(self, other)) {
    return *std::move(r);
  }
  return at::cpu::mul(self, other);
}
at::Tensor& mul_(at::Tensor& self, T other) {
  if (try_ka<kMulInplace, Layout::kContiguous, Writes::kSelf>(self, other)) return self;
  return at::cpu::mul_(self, other);
}

// ---- torch.ops.ka only ---------------------------------------------------------------------

// As aten::linear decomposes in libtorch 1.13: addmm for a 2-D input with a bias, else a
// matmul (mm on the flattened input) and an in-place bias add.
at::Tensor linear(T input, T weight, const c10::optional<at::Tensor>& bias) {
  const bool has_bias = bias.has_value() && bias->defined();
  if (input.dim() == 2 && has_bias) return served::addmm(*bias, input, weight.t(), 1, 1);
  if (input.dim() < 2 || weight.dim() != 2) return at::linear(input, weight, bias);
  at::Tensor out = served::mm(input.reshape({-1, input.size(-1)}), weight.t());
  std::vector<std::int64_t> shape(input.sizes().begin(), input.sizes().end());
  shape.back() = weight.size(0);
  out = out.view(shape);
  if (has_bias) served::add_(out, *bias, 1);
  return out;
}
at::Tensor layer_norm(T input, at::IntArrayRef normalized_shape,
                      const c10::optional<at::Tensor>& weight,
                      const c10::optional<at::Tensor>& bias, double eps, bool cudnn_enable) {
  if (auto r = try_ka<kLayerNorm>(input, normalized_shape.vec(), weight, bias, eps,
                                  cudnn_enable)) {
    return *std::move(r);
  }
  // The composite itself: at::layer_norm would come back to ka's override when enabled.
  return at::native::layer_norm(input, normalized_shape, weight, bias, eps, cudnn_enable);
}

// Note [Overriding a composite operator]
// aten::layer_norm is CompositeImplicitAutograd: it has no CPU kernel of its own and no
// backward; it calls native_layer_norm, whose CPU kernel also returns the mean and 1/std its
// backward needs, which ka's kernel does not produce. So ka takes layer_norm itself, with the
// same kernel at two keys: AutogradCPU, where a direct registration wins over the composite
// (which would otherwise run there), and CPU, which inference mode reaches without passing
// autograd. When autograd would record the call (grad mode on and an input requires grad),
// the kernel runs the composite, at::native::layer_norm, which records native_layer_norm's
// backward exactly as stock PyTorch does; so does every call ka refuses.
bool records_grad(std::initializer_list<const at::Tensor*> tensors) {
  if (!at::GradMode::is_enabled()) return false;
  for (const at::Tensor* t : tensors) {
    if (t->defined() && t->requires_grad()) return true;
  }
  return false;
}

at::Tensor layer_norm_override(T input, at::IntArrayRef normalized_shape,
                               const c10::optional<at::Tensor>& weight,
                               const c10::optional<at::Tensor>& bias, double eps,
                               bool cudnn_enable) {
  const at::Tensor none;
  if (records_grad({&input, weight ? &*weight : &none, bias ? &*bias : &none})) {
    const std::array<c10::IValue, 6> stack{input, normalized_shape.vec(), weight, bias, eps,
                                           cudnn_enable};
    record_fallback(kLayerNorm, stack.data(), stack.size(),
                    "an input requires grad (libtorch's layer_norm records the backward)");
  } else if (auto r = try_ka<kLayerNorm>(input, normalized_shape.vec(), weight, bias, eps,
                                         cudnn_enable)) {
    return *std::move(r);
  }
  return at::native::layer_norm(input, normalized_shape, weight, bias, eps, cudnn_enable);
}

at::Tensor softmax_int(T self, std::int64_t dim, c10::optional<at::ScalarType> dtype) {
  if (!dtype.has_value() || *dtype == self.scalar_type()) return served::softmax_(self, dim, false);
  return at::softmax(self, dim, dtype);
}

}  // namespace served

}  // namespace

runtime::Runtime& runtime_with_table() {
  static runtime::Runtime rt;
  return rt;
}

void impl_served_ops(::torch::Library& lib) {
  lib.impl("mm", TORCH_FN(served::mm));
  lib.impl("mm.out", TORCH_FN(served::mm_out));
  lib.impl("addmm", TORCH_FN(served::addmm));
  lib.impl("addmm.out", TORCH_FN(served::addmm_out));
  lib.impl("bmm", TORCH_FN(served::bmm));
  lib.impl("_softmax", TORCH_FN(served::softmax_));
  lib.impl("sum.dim_IntList", TORCH_FN(served::sum_dim));
  lib.impl("gelu", TORCH_FN(served::gelu));
  lib.impl("relu", TORCH_FN(served::relu));
  lib.impl("relu_", TORCH_FN(served::relu_));
  lib.impl("sigmoid", TORCH_FN(served::sigmoid));
  lib.impl("silu", TORCH_FN(served::silu));
  lib.impl("add.Tensor", TORCH_FN(served::add));
  lib.impl("add_.Tensor", TORCH_FN(served::add_));
  lib.impl("sub.Tensor", TORCH_FN(served::sub));
  lib.impl("mul.Tensor", TORCH_FN(served::mul));
  lib.impl("mul_.Tensor", TORCH_FN(served::mul_));
}

void impl_composite_overrides(::torch::Library& cpu, ::torch::Library& autograd_cpu) {
  cpu.impl("layer_norm", TORCH_FN(served::layer_norm_override));
  autograd_cpu.impl("layer_norm", TORCH_FN(served::layer_norm_override));
}

void impl_ka_only_ops(::torch::Library& lib) {
  lib.impl("linear", TORCH_FN(served::linear));
  lib.impl("layer_norm", TORCH_FN(served::layer_norm));
  lib.impl("softmax.int", TORCH_FN(served::softmax_int));
}

namespace {

// Every operator of torch.ops.ka, by aten name and overload; `writes` when it writes an
// argument (in place or out=).
struct KaOp {
  const char* name;
  const char* overload;
  bool writes;
};
constexpr std::array<KaOp, 20> kKaOps{{
    {"mm", "", false},          {"mm", "out", true},       {"addmm", "", false},
    {"addmm", "out", true},     {"bmm", "", false},        {"_softmax", "", false},
    {"sum", "dim_IntList", false}, {"gelu", "", false},    {"relu", "", false},
    {"relu_", "", true},        {"sigmoid", "", false},    {"silu", "", false},
    {"add", "Tensor", false},   {"add_", "Tensor", true},  {"sub", "Tensor", false},
    {"mul", "Tensor", false},   {"mul_", "Tensor", true},  {"linear", "", false},
    {"layer_norm", "", false},  {"softmax", "int", false}}};

std::string qualified(const KaOp& op) {
  return *op.overload ? std::string(op.name) + "." + op.overload : std::string(op.name);
}

}  // namespace

void def_served_ops(::torch::Library& lib) {
  // aten's own schemas, renamed: torch.ops.ka.<op> takes exactly what torch.ops.aten.<op> does.
  for (const KaOp& op : kKaOps) {
    const c10::OperatorHandle aten = c10::Dispatcher::singleton().findSchemaOrThrow(
        (std::string("aten::") + op.name).c_str(), op.overload);
    lib.def(aten.schema().cloneWithName(std::string("ka::") + op.name, op.overload));
  }
}

void impl_autograd_not_implemented(::torch::Library& lib,
                                   ::torch::Library& inplace_or_view) {
  for (const KaOp& op : kKaOps) {
    lib.impl(qualified(op).c_str(), ::torch::autograd::autogradNotImplementedFallback());
    if (op.writes) {
      inplace_or_view.impl(qualified(op).c_str(),
                           ::torch::autograd::autogradNotImplementedInplaceOrViewFallback());
    }
  }
}

}  // namespace ka::pytorch::detail
