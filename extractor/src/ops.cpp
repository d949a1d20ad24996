// Operator specs and the packers of each kernel family. See Note [Packing].
#include <ka/extractor/detail/ops.hpp>

#include <ka/core/error.hpp>
#include <ka/extractor/tensor_interop.hpp>
#include <ka/kernels/attention.hpp>
#include <ka/kernels/reduction.hpp>

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>

#include <algorithm>
#include <cstring>
#include <optional>

namespace ka::extractor::detail {

// Note [Packing]
// A packer turns the schema arguments of a group into one kernel's argument struct, written
// into the task's ParamBuffer (so scalars such as alpha or eps outlive the packing call),
// allocates the group's output, and records every byte range read or written. Checks follow
// ATen's rules and messages where ATen has them (broadcasting, "mat1 and mat2 shapes cannot
// be multiplied"), and name the op and the argument otherwise. The hot path (one element-wise
// op on small tensors) allocates nothing but the output tensor.

namespace {

constexpr std::array<OpSpec, kNumOps> kSpecs = {{
    {0, "aten::add.Tensor", OpKind::kElementwise, 3, false, false, {{0, 1}}},
    {1, "aten::add.Scalar", OpKind::kElementwise, 3, false, false, {{0, -1}}},
    {2, "aten::add_.Tensor", OpKind::kElementwise, 3, true, false, {{0, 1}}},
    {3, "aten::sub.Tensor", OpKind::kElementwise, 3, false, false, {{0, 1}}},
    {4, "aten::mul.Tensor", OpKind::kElementwise, 2, false, false, {{0, 1}}},
    {5, "aten::mul.Scalar", OpKind::kElementwise, 2, false, false, {{0, -1}}},
    {6, "aten::mul_.Tensor", OpKind::kElementwise, 2, true, false, {{0, 1}}},
    {7, "aten::relu", OpKind::kElementwise, 1, false, true, {{0, -1}}},
    {8, "aten::relu_", OpKind::kElementwise, 1, true, false, {{0, -1}}},
    {9, "aten::gelu", OpKind::kElementwise, 2, false, true, {{0, -1}}},
    {10, "aten::sigmoid", OpKind::kElementwise, 1, false, true, {{0, -1}}},
    {11, "aten::silu", OpKind::kElementwise, 1, false, true, {{0, -1}}},
    {12, "aten::mm", OpKind::kGemm, 2, false, false, {{-1, -1}}},
    {13, "aten::addmm", OpKind::kGemm, 5, false, false, {{-1, -1}}},
    {14, "aten::linear", OpKind::kGemm, 3, false, false, {{-1, -1}}},
    {15, "aten::bmm", OpKind::kBmm, 2, false, false, {{-1, -1}}},
    {16, "aten::_softmax", OpKind::kSoftmax, 3, false, false, {{-1, -1}}},
    {17, "aten::softmax.int", OpKind::kSoftmax, 3, false, false, {{-1, -1}}},
    {18, "aten::layer_norm", OpKind::kLayerNorm, 6, false, false, {{-1, -1}}},
    {19, "aten::sum.dim_IntList", OpKind::kSum, 4, false, false, {{-1, -1}}},
    {20, "aten::mm.out", OpKind::kGemm, 3, false, false, {{-1, -1}}, 2},
    {21, "aten::addmm.out", OpKind::kGemm, 6, false, false, {{-1, -1}}, 5},
    {22, "aten::matmul", OpKind::kBmm, 2, false, false, {{-1, -1}}},
    {23, "aten::div.Scalar", OpKind::kElementwise, 2, false, false, {{0, -1}}},
    {24, "aten::masked_fill.Scalar", OpKind::kMaskedFill, 3, false, false, {{-1, -1}}},
    {25, "aten::div.Tensor", OpKind::kElementwise, 2, false, false, {{0, 1}}},
    {26, "aten::tanh", OpKind::kElementwise, 1, false, false, {{0, -1}}},
    {27, "aten::pow.Tensor_Scalar", OpKind::kElementwise, 2, false, false, {{0, -1}}},
    {28, "aten::masked_fill.Tensor", OpKind::kMaskedFill, 3, false, false, {{-1, -1}}},
    {29, "aten::where.self", OpKind::kMaskedFill, 3, false, false, {{-1, -1}}},
    {30, "aten::where.ScalarOther", OpKind::kMaskedFill, 3, false, false, {{-1, -1}}},
    {31, "aten::where.ScalarSelf", OpKind::kMaskedFill, 3, false, false, {{-1, -1}}},
    {32, "aten::to.dtype", OpKind::kIdentityCast, 5, false, false, {{-1, -1}}},
    {33, "aten::to.device", OpKind::kIdentityCast, 6, false, false, {{-1, -1}}},
    {34, "aten::to.other", OpKind::kIdentityCast, 5, false, false, {{-1, -1}}},
    {35, "aten::to.dtype_layout", OpKind::kIdentityCast, 8, false, false, {{-1, -1}}},
    {36, "aten::type_as", OpKind::kIdentityCast, 2, false, false, {{-1, -1}}},
    {37, "aten::contiguous", OpKind::kElementwise, 2, false, false, {{0, -1}}},
    {38, "aten::neg", OpKind::kElementwise, 1, false, false, {{0, -1}}},
    {39, "aten::exp", OpKind::kElementwise, 1, false, false, {{0, -1}}},
}};

constexpr int kMulScalarId = 5;
constexpr int kDivScalarId = 23;
constexpr int kMaskedFillId = 24;
constexpr int kMaskedFillTensorId = 28;
constexpr int kWhereId = 29;
constexpr int kWhereScalarOtherId = 30;
constexpr int kWhereScalarSelfId = 31;
constexpr int kToDtypeId = 32;
constexpr int kToDeviceId = 33;
constexpr int kToOtherId = 34;
constexpr int kToDtypeLayoutId = 35;
constexpr int kTypeAsId = 36;
constexpr int kContiguousId = 37;
constexpr int kSoftmaxId = 16;  // aten::_softmax (softmax.int is 17)
constexpr int kMatmulId = 22;
constexpr int kMulTensorId = 4;
constexpr int kDivTensorId = 25;
constexpr int kTanhId = 26;
constexpr int kPowScalarId = 27;
constexpr int kNegId = 38;
constexpr int kExpId = 39;

// Note [matmul on ka]
// aten::matmul of two tensors of the same rank >= 3 with equal batch dimensions is a bmm over
// the batch dimensions taken as one (attention's q @ k^T and probs @ v, heads included), when
// each operand's batch dimensions can be viewed as one without a copy. Its other cases (1-D
// and 2-D operands, broadcast batch dimensions, batch dimensions no view can merge) are
// refused as NotImplementedError, so a graph runs them on libtorch (Note [Fallback nodes]).
// Its rows in a tuned table are aten::bmm's.

// `t` viewed as `shape`, whose first size is -1 (the rest of t's elements); nullopt when no view
// can describe that.
std::optional<at::Tensor> viewed_as(const at::Tensor& t, std::vector<std::int64_t> shape) {
  if (t.numel() == 0) shape[0] = 0;  // -1 is ambiguous over no elements
  try {
    return t.view(shape);
  } catch (const c10::Error&) {
    return std::nullopt;
  }
}

// `t` with its leading dimensions merged into one: [batch, rows, cols].
std::optional<at::Tensor> as_batched_matrices(const at::Tensor& t) {
  return viewed_as(t, {-1, t.size(-2), t.size(-1)});
}

// linear's input (argument 0, more than 2-D) as the [M, K] matrix it multiplies: a view, or
// where no view describes it (a transposed activation: MLP-Mixer's token mixing) a copy, made
// now, which reads the input's data, so only where that data is final while packing
// (NodeArgs::fixed_args). Else the task would read the input before the task that writes it
// ran, and depend on nothing: ka refuses it, and libtorch's linear runs after the tasks before
// it (Note [Fallback nodes]).
at::Tensor rows_of(const NodeArgs& n, const at::Tensor& input, std::int64_t k) {
  if (auto rows = viewed_as(input, {-1, k})) return *std::move(rows);
  KA_CHECK_TYPE(NotImplementedError, (n.fixed_args & 1U) != 0, n.spec->signature,
                ": input of sizes ", c10::str(input.sizes()), " and strides ",
                c10::str(input.strides()), " is no [M, K] view, and copying it needs data ",
                "that is not final while extracting; libtorch runs it");
  return input.reshape({input.numel() == 0 ? 0 : -1, k});
}

// The GEMM ops' argument layouts: mm(self, mat2[, out]), addmm(self, mat1, mat2, beta,
// alpha[, out]), linear(input, weight, bias).
enum class GemmForm : std::uint8_t { kMm, kAddmm, kLinear };
GemmForm gemm_form(const OpSpec& op) {
  switch (op.id) {
    case 12:
    case 20:
      return GemmForm::kMm;
    case 13:
    case 21:
      return GemmForm::kAddmm;
    default:
      return GemmForm::kLinear;
  }
}

[[noreturn]] void fail(const OpSpec& op, const std::string& what) {
  KA_THROW(ValueError, op.signature, ": ", what);
}

// Whether libtorch's device `d` is ka's `device`.
bool is_on(const c10::Device& d, Device device) {
  return d.is_cpu() ? device.type == DeviceType::kCPU
                    : d.is_cuda() && device.type == DeviceType::kCUDA && d.index() == device.index;
}

const at::Tensor& tensor_arg(const NodeArgs& n, int index, const char* name, Device device) {
  const c10::IValue& v = *n.args[index];
  if (!v.isTensor()) {
    fail(*n.spec, std::string("argument '") + name + "' (position " + std::to_string(index) +
                      ") must be a Tensor, got " + v.tagKind());
  }
  const at::Tensor& t = v.toTensor();
  if (!t.defined()) fail(*n.spec, std::string("argument '") + name + "' is an undefined tensor");
  KA_CHECK_TYPE(NotImplementedError, t.scalar_type() == at::kFloat, n.spec->signature,
                ": ka's kernels take float32; argument '", name, "' is ",
                c10::toString(t.scalar_type()));
  const auto& d = t.device();
  if (!is_on(d, device)) {
    fail(*n.spec, std::string("expected all tensors on ") + device.str() + ", but argument '" +
                      name + "' is on " + d.str());
  }
  return t;
}

const at::Tensor* optional_tensor_arg(const NodeArgs& n, int index, const char* name,
                                      Device device) {
  if (index >= n.num_args || n.args[index]->isNone()) return nullptr;
  return &tensor_arg(n, index, name, device);
}

double scalar_arg(const NodeArgs& n, int index, const char* name) {
  const c10::IValue& v = *n.args[index];
  if (v.isDouble()) return v.toDouble();
  if (v.isInt()) return static_cast<double>(v.toInt());
  if (v.isBool()) return v.toBool() ? 1.0 : 0.0;
  if (v.isScalar()) return v.toScalar().toDouble();
  fail(*n.spec, std::string("argument '") + name + "' must be a number, got " + v.tagKind());
}

std::int64_t int_arg(const NodeArgs& n, int index, const char* name) {
  const c10::IValue& v = *n.args[index];
  if (!v.isInt()) {
    fail(*n.spec, std::string("argument '") + name + "' must be an int, got " + v.tagKind());
  }
  return v.toInt();
}

// An optional `ScalarType? dtype` argument: None or float32 (ka's kernels are fp32).
void check_dtype_arg(const NodeArgs& n, int index) {
  if (n.args[index]->isNone()) return;
  const auto dt = n.args[index]->toScalarType();
  KA_CHECK_TYPE(NotImplementedError, dt == at::kFloat, n.spec->signature,
                ": ka's kernels take float32; dtype=", c10::toString(dt));
}

void check_arity(const NodeArgs& n) {
  if (n.num_args != n.spec->num_args) {
    fail(*n.spec, "expected " + std::to_string(n.spec->num_args) + " arguments, got " +
                      std::to_string(n.num_args));
  }
}

std::int64_t wrap_dim(const OpSpec& op, std::int64_t dim, std::int64_t ndim) {
  const std::int64_t n = std::max<std::int64_t>(ndim, 1);
  if (dim < -n || dim >= n) {
    fail(op, "dimension out of range (expected to be in range of [" + std::to_string(-n) + ", " +
                 std::to_string(n - 1) + "], but got " + std::to_string(dim) + ")");
  }
  return dim < 0 ? dim + n : dim;
}

at::Tensor allocate(c10::IntArrayRef sizes, Device device) {
  if (device.type == DeviceType::kCPU) {
    // Straight to the CPU allocator: the dispatcher round trip of at::empty costs more than
    // a small element-wise kernel.
    return at::detail::empty_cpu(sizes, at::kFloat, /*pin_memory=*/false,
                                 c10::MemoryFormat::Contiguous);
  }
  return at::empty(sizes, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, device.index));
}

void add_range(Packed& out, const at::Tensor& t, Access access) {
  KA_ASSERT(out.num_ranges < Packed::kMaxRanges, "too many MemRanges in one task");
  out.ranges[static_cast<std::size_t>(out.num_ranges++)] = range_of(t, access);
}

void add_key(Packed& out, const kernels::TensorView& v) {
  if (out.num_key_views < Packed::kMaxKeyViews) {
    out.key_views[static_cast<std::size_t>(out.num_key_views++)] = v;
  }
}

// Records what a packer produced: the kernel's argument struct, its family, the op name the
// kernel's heuristic reads the shape key under, and the name table lookups use.
void finish_pack(Packed& out, const void* args, OpKind family, const char* key_op,
                 const char* lookup_op) {
  out.args = args;
  out.family = family;
  out.key_op = key_op;
  out.lookup_op = lookup_op;
}

// ---- element-wise ------------------------------------------------------------------------

// The external tensor inputs of a chain, deduplicated, and the output shape they broadcast to.
struct EwInputs {
  std::array<const at::Tensor*, kernels::EwProgram::kMaxInputs> tensors{};
  int count = 0;
  int scalar_operands = 0;  // 0-dim tensors taken as scalars (Note [0-dim operands as scalars])
  std::array<std::int64_t, kernels::TensorView::kMaxDims> sizes{};
  int ndim = 0;

  int index_of(const OpSpec& op, const at::Tensor& t) {
    for (int i = 0; i < count; ++i) {
      if (tensors[static_cast<std::size_t>(i)]->unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) {
        return i;
      }
    }
    if (count == kernels::EwProgram::kMaxInputs) fail(op, "too many inputs in one fused kernel");
    tensors[static_cast<std::size_t>(count)] = &t;
    broadcast_into(op, t);
    return count++;
  }
  void broadcast_into(const OpSpec& op, const at::Tensor& t) {
    const int td = static_cast<int>(t.dim());
    if (td > kernels::TensorView::kMaxDims) fail(op, "more than 8 dimensions");
    const int nd = std::max(ndim, td);
    std::array<std::int64_t, kernels::TensorView::kMaxDims> r{};
    for (int i = 0; i < nd; ++i) {
      const int a = i - (nd - ndim);
      const int b = i - (nd - td);
      const std::int64_t sa = a >= 0 ? sizes[static_cast<std::size_t>(a)] : 1;
      const std::int64_t sb = b >= 0 ? t.size(b) : 1;
      if (sa != sb && sa != 1 && sb != 1) {
        fail(op, "the size of tensor a (" + std::to_string(sa) + ") must match the size of tensor b (" +
                     std::to_string(sb) + ") at non-singleton dimension " + std::to_string(i));
      }
      r[static_cast<std::size_t>(i)] = sa == 1 ? sb : sa;
    }
    sizes = r;
    ndim = nd;
  }
};

// Note [0-dim operands as scalars]
// A traced model's Python numbers are 0-dim float64 (or int64) tensor constants: `x * 2.0`
// traces to aten::mul.Tensor(x, prim::Constant[value={2.}]), which ka's float32 kernels
// refused, so every such node ran on libtorch as a data fallback (a wait for every task
// before it). With a float32 tensor as the other operand, ATen takes the 0-dim operand as a
// scalar: the float32 operand sets the result type and the value is converted to float. So
// the `other` of add/sub/mul/div.Tensor, when it is a 0-dim CPU tensor of another real type
// whose data is final while packing (NodeArgs::fixed_args), is a scalar of ka's program
// (a 0-dim float32 one stays a tensor operand, as before). Where the result would be 0-dim,
// ATen would promote both operands to the wider type, so such a group is refused. Eager
// plans key on the scalar's value (Note [Eager plans]).
std::optional<float> scalar_operand(const NodeArgs& n, int arg) {
  if (arg == n.link_arg || ((n.fixed_args >> arg) & 1U) == 0) return std::nullopt;
  const c10::IValue& v = *n.args[arg];
  if (!v.isTensor()) return std::nullopt;
  const at::Tensor& t = v.toTensor();
  if (!t.defined() || t.dim() != 0 || !t.is_cpu() || t.scalar_type() == at::kFloat) {
    return std::nullopt;
  }
  const at::ScalarType type = t.scalar_type();
  if (!at::isFloatingType(type) && !at::isIntegralType(type, /*includeBool=*/false)) {
    return std::nullopt;
  }
  return static_cast<float>(t.item<double>());
}

// Note [Integer powers]
// pow.Tensor_Scalar runs on ka for the exponents 2 and 3 only, as ATen computes them for
// float32: x * x and (x * x) * x, so the result is ATen's bit for bit (the tanh-approximate
// GELU as GPT-2's models write it out cubes its input). Any other exponent is refused as
// NotImplementedError and runs on libtorch, which has its own cases (sqrt, reciprocal) and
// std::pow for the rest.
int emit_pow(const NodeArgs& n, int x, kernels::EwProgram& p) {
  using kernels::EwOp;
  const double e = scalar_arg(n, 1, "exponent");
  if (e == 2.0) return p.binary(EwOp::kMul, x, x);
  if (e == 3.0) return p.binary(EwOp::kMul, p.binary(EwOp::kMul, x, x), x);
  KA_THROW(NotImplementedError, n.spec->signature, ": ka computes exponents 2 and 3, not ", e,
           " (Note [Integer powers])");
}

// Note [contiguous as a copy]
// aten::contiguous of a strided tensor is a copy into a new contiguous tensor: ka's
// element-wise kernel with a program that only reads its input (heads merged back after
// attention, q, k and v made contiguous before bmm), where libtorch's copy was a data fallback
// that waited for every task before it. Of a contiguous tensor it returns the tensor itself,
// an alias that a copy would break (a later in-place write through either would not reach the
// other), so that case is refused and runs on libtorch (a view: during extraction). In a
// chain, after an element-wise op of ka's whose result never materialises, it is the
// identity. Only the default memory format is ka's.
void check_contiguous_copy(const NodeArgs& n) {
  const c10::IValue& format = *n.args[1];
  const bool default_format =
      format.isNone() ||
      (format.isInt() && format.toInt() == static_cast<int>(c10::MemoryFormat::Contiguous));
  KA_CHECK_TYPE(NotImplementedError, default_format, n.spec->signature,
                ": ka copies to the default (contiguous) memory format only");
  if (n.link_arg == 0) return;
  const c10::IValue& v = *n.args[0];
  KA_CHECK_TYPE(NotImplementedError,
                !(v.isTensor() && v.toTensor().defined() && v.toTensor().is_contiguous()),
                n.spec->signature, ": already contiguous: libtorch returns it as it is");
}

// Emits node `n`'s computation; `link` is the register of the previous node's output.
int emit_elementwise(const NodeArgs& n, int link, EwInputs& in, kernels::EwProgram& p,
                     Device device) {
  using kernels::EwOp;
  const OpSpec& op = *n.spec;
  auto reg = [&](int arg, const char* name) {
    if (arg == n.link_arg) return link;
    return p.input(in.index_of(op, tensor_arg(n, arg, name, device)));
  };
  // A binary op's second operand: a tensor, or a 0-dim one taken as a scalar.
  auto other = [&] {
    if (const std::optional<float> s = scalar_operand(n, 1)) {
      ++in.scalar_operands;
      return p.scalar(*s);
    }
    return reg(1, "other");
  };
  switch (op.id) {
    case 0:  // add.Tensor(self, other, alpha)
    case 2:
    case 3: {  // sub.Tensor(self, other, alpha)
      const int a = reg(0, "self");
      int b = other();
      const double alpha = scalar_arg(n, 2, "alpha");
      if (alpha != 1.0) b = p.binary(EwOp::kMul, b, p.scalar(static_cast<float>(alpha)));
      return p.binary(op.id == 3 ? EwOp::kSub : EwOp::kAdd, a, b);
    }
    case 1: {  // add.Scalar(self, other, alpha)
      const int a = reg(0, "self");
      const double v = scalar_arg(n, 1, "other") * scalar_arg(n, 2, "alpha");
      return p.binary(EwOp::kAdd, a, p.scalar(static_cast<float>(v)));
    }
    case 4:
    case 6: {
      // Sequenced: inputs are numbered in argument order (the eager plans rely on it).
      const int a = reg(0, "self");
      const int b = other();
      return p.binary(EwOp::kMul, a, b);
    }
    case 5:
      return p.binary(EwOp::kMul, reg(0, "self"),
                      p.scalar(static_cast<float>(scalar_arg(n, 1, "other"))));
    case kDivScalarId:  // true division, as ATen's (not a multiply by the reciprocal)
      return p.binary(EwOp::kDiv, reg(0, "self"),
                      p.scalar(static_cast<float>(scalar_arg(n, 1, "other"))));
    case kDivTensorId: {
      const int a = reg(0, "self");
      const int b = other();
      return p.binary(EwOp::kDiv, a, b);
    }
    case 7:
    case 8:
      return p.unary(EwOp::kRelu, reg(0, "self"));
    case 9: {
      const c10::IValue& approx = *n.args[1];
      if (!approx.isString()) fail(op, "argument 'approximate' must be a str");
      const std::string& a = approx.toStringRef();
      if (a != "none" && a != "tanh") {
        fail(op, "approximate argument must be either none or tanh, got '" + a + "'");
      }
      return p.unary(a == "tanh" ? EwOp::kGeluTanh : EwOp::kGelu, reg(0, "self"));
    }
    case 10:
      return p.unary(EwOp::kSigmoid, reg(0, "self"));
    case 11:
      return p.unary(EwOp::kSilu, reg(0, "self"));
    case kTanhId:
      return p.unary(EwOp::kTanh, reg(0, "self"));
    case kNegId:
      return p.unary(EwOp::kNeg, reg(0, "self"));
    case kExpId:
      return p.unary(EwOp::kExp, reg(0, "self"));
    case kPowScalarId:
      return emit_pow(n, reg(0, "self"), p);
    case kContiguousId:
      check_contiguous_copy(n);
      return n.link_arg == 0 ? link : reg(0, "self");
    default:
      KA_ASSERT(false, op.signature, " is not element-wise");
  }
  return 0;
}

// Packs a chain of element-wise nodes into `program`/`inputs`; returns the broadcast shape.
EwInputs pack_chain(const GroupArgs& g, int count, kernels::EwProgram& program, Device device) {
  EwInputs in;
  int link = -1;
  for (int k = 0; k < count; ++k) {
    const NodeArgs& n = g.nodes[k];
    check_arity(n);
    link = emit_elementwise(n, link, in, program, device);
  }
  KA_CHECK_TYPE(NotImplementedError, in.scalar_operands == 0 || in.ndim > 0,
                g.nodes[0].spec->signature, ": a 0-dim result of a 0-dim operand of another type "
                "(ATen promotes it)");
  program.set_result(link);
  return in;
}

// `keys`: whether the deduplicated inputs form the shape key (fused groups); a single op's
// key lists its tensor arguments in schema order instead (see key_single_op).
void fill_inputs(const EwInputs& in, const at::Tensor& out,
                 std::array<kernels::TensorView, kernels::EwProgram::kMaxInputs>& views,
                 Packed& packed, bool keys = true) {
  for (int i = 0; i < in.count; ++i) {
    const at::Tensor& t = *in.tensors[static_cast<std::size_t>(i)];
    const kernels::TensorView v = to_view(t);
    views[static_cast<std::size_t>(i)] =
        kernels::broadcast_view(v, out.sizes().data(), static_cast<int>(out.dim()));
    packed.strided = packed.strided || !v.is_contiguous();
    if (keys) add_key(packed, v);
    if (t.unsafeGetTensorImpl() != out.unsafeGetTensorImpl()) add_range(packed, t, Access::kRead);
  }
}

void pack_elementwise(const GroupArgs& g, ParamBuffer& buf, Packed& out) {
  auto* args = buf.emplace<kernels::ElementwiseArgs>();
  const EwInputs in = pack_chain(g, g.count, args->program, out.device);
  const OpSpec& last = *g.nodes[g.count - 1].spec;
  const c10::IntArrayRef shape(in.sizes.data(), static_cast<std::size_t>(in.ndim));
  const NodeArgs& first = g.nodes[0];
  if (g.count == 1 && last.inplace) {
    const at::Tensor& self = first.args[0]->toTensor();
    if (self.sizes() != shape) {
      fail(last, "output with shape " + c10::str(self.sizes()) +
                     " doesn't match the broadcast shape " + c10::str(shape));
    }
    out.result = self;
    add_range(out, self, Access::kReadWrite);
  } else {
    out.result = allocate(shape, out.device);
    add_range(out, out.result, Access::kWrite);
  }
  args->out = to_view(out.result);
  fill_inputs(in, out.result, args->inputs, out, g.count > 1);
  if (g.count == 1) {
    // ShapeKey: every tensor argument in schema order (add(x, x) has two).
    for (const std::int8_t a : last.tensor_args) {
      if (a >= 0) add_key(out, to_view(first.args[a]->toTensor()));
    }
  }
  const char* name = g.count == 1 ? last.signature : "fused::ew_chain";
  finish_pack(out, args, OpKind::kElementwise, name, name);
}

// ---- GEMM --------------------------------------------------------------------------------

kernels::Epilogue epilogue_of(const NodeArgs& n) {
  switch (n.spec->id) {
    case 7:
      return kernels::Epilogue::kRelu;
    case 9: {
      const c10::IValue& a = *n.args[1];
      if (!a.isString() || (a.toStringRef() != "none" && a.toStringRef() != "tanh")) {
        fail(*n.spec, "approximate argument must be either none or tanh");
      }
      return a.toStringRef() == "tanh" ? kernels::Epilogue::kGeluTanh : kernels::Epilogue::kGelu;
    }
    case 10:
      return kernels::Epilogue::kSigmoid;
    case 11:
      return kernels::Epilogue::kSilu;
    default:
      KA_ASSERT(false, n.spec->signature, " is not an activation");
  }
  return kernels::Epilogue::kNone;
}

void check_matrices(const OpSpec& op, const at::Tensor& a, const at::Tensor& b) {
  if (a.dim() != 2) fail(op, "self must be a matrix, got " + std::to_string(a.dim()) + "-D");
  if (b.dim() != 2) fail(op, "mat2 must be a matrix, got " + std::to_string(b.dim()) + "-D");
  if (a.size(1) != b.size(0)) {
    fail(op, "mat1 and mat2 shapes cannot be multiplied (" + std::to_string(a.size(0)) + "x" +
                 std::to_string(a.size(1)) + " and " + std::to_string(b.size(0)) + "x" +
                 std::to_string(b.size(1)) + ")");
  }
}

// The `out` argument of an out= overload, resized to `sizes` as PyTorch's resize_output does.
// ka writes a contiguous output that overlaps none of `inputs`; others are declined.
at::Tensor output_arg(const NodeArgs& n, c10::IntArrayRef sizes, Device device,
                      std::initializer_list<const at::Tensor*> inputs) {
  const at::Tensor& t = tensor_arg(n, n.spec->out_arg, "out", device);
  if (t.sizes() != sizes) t.resize_(sizes);
  KA_CHECK_TYPE(NotImplementedError, t.is_contiguous(), n.spec->signature,
                ": ka writes contiguous outputs; 'out' has strides ", c10::str(t.strides()));
  const MemRange written = range_of(t, Access::kWrite);
  for (const at::Tensor* in : inputs) {
    KA_CHECK_TYPE(NotImplementedError, in == nullptr || !written.overlaps(range_of(*in, Access::kRead)),
                  n.spec->signature, ": 'out' overlaps an input; ka's kernels read their inputs "
                  "while writing");
  }
  return t;
}

void pack_gemm(const GroupArgs& g, ParamBuffer& buf, Packed& out) {
  const NodeArgs& n = g.nodes[0];
  check_arity(n);
  const OpSpec& op = *n.spec;
  auto* args = buf.emplace<kernels::AddmmArgs>();
  const at::Tensor* bias = nullptr;
  at::Tensor mat1;
  at::Tensor mat2;
  std::vector<std::int64_t> out_shape;  // only for linear on >2-D input
  const GemmForm form = gemm_form(op);
  // The argument whose data mat2 is: linear's weight, else the schema's mat2.
  const int mat2_arg = form == GemmForm::kMm || form == GemmForm::kLinear ? 1 : 2;
  if (form == GemmForm::kMm) {
    mat1 = tensor_arg(n, 0, "self", out.device);
    mat2 = tensor_arg(n, 1, "mat2", out.device);
    args->beta = 0.0F;
  } else if (form == GemmForm::kAddmm) {
    bias = &tensor_arg(n, 0, "self", out.device);
    mat1 = tensor_arg(n, 1, "mat1", out.device);
    mat2 = tensor_arg(n, 2, "mat2", out.device);
    args->beta = static_cast<float>(scalar_arg(n, 3, "beta"));
    args->alpha = static_cast<float>(scalar_arg(n, 4, "alpha"));
  } else {  // linear(input, weight, bias?) = input @ weight.t() + bias
    const at::Tensor& input = tensor_arg(n, 0, "input", out.device);
    const at::Tensor& weight = tensor_arg(n, 1, "weight", out.device);
    bias = optional_tensor_arg(n, 2, "bias", out.device);
    if (weight.dim() != 2) fail(op, "weight must be 2-D, got " + c10::str(weight.sizes()));
    if (input.dim() < 1) fail(op, "input must have at least 1 dimension");
    const std::int64_t k = input.size(-1);
    if (k != weight.size(1)) {
      fail(op, "mat1 and mat2 shapes cannot be multiplied (" + std::to_string(input.numel() / std::max<std::int64_t>(k, 1)) +
                   "x" + std::to_string(k) + " and " + std::to_string(weight.size(1)) + "x" +
                   std::to_string(weight.size(0)) + ")");
    }
    mat1 = input.dim() == 2 ? input : rows_of(n, input, k);
    mat2 = weight.t();
    if (input.dim() != 2) {
      out_shape.assign(input.sizes().begin(), input.sizes().end());
      out_shape.back() = weight.size(0);
    }
    if (bias == nullptr) args->beta = 0.0F;
  }
  check_matrices(op, mat1, mat2);
  if (bias != nullptr) {
    const at::Tensor& b = *bias;
    const bool ok = b.dim() <= 2 && (b.dim() < 1 || b.size(-1) == 1 || b.size(-1) == mat2.size(1)) &&
                    (b.dim() < 2 || b.size(0) == 1 || b.size(0) == mat1.size(0));
    if (!ok) {
      fail(op, "self of shape " + c10::str(b.sizes()) + " cannot broadcast to [" +
                   std::to_string(mat1.size(0)) + ", " + std::to_string(mat2.size(1)) + "]");
    }
    args->self = to_view(b);
    add_range(out, b, Access::kRead);
  }
  if (g.kind == FusionKind::kGemmEpilogue) args->epilogue = epilogue_of(g.nodes[1]);
  at::Tensor result = op.out_arg < 0
                          ? allocate({mat1.size(0), mat2.size(1)}, out.device)
                          : output_arg(n, {mat1.size(0), mat2.size(1)}, out.device,
                                       {&mat1, &mat2, bias});
  args->out = to_view(result);
  args->mat1 = to_view(mat1);
  args->mat2 = to_view(mat2);
  add_range(out, mat1, Access::kRead);
  add_range(out, mat2, Access::kRead);
  add_range(out, result, Access::kWrite);
  out.result = out_shape.empty() ? result : result.view(out_shape);
  if (((n.constant_args >> mat2_arg) & 1U) != 0) {
    out.constant_mat2 = {n.args[mat2_arg]->toTensor(), args->mat2, &args->mat2_packed};
  }
  out.temporaries[0] = std::move(mat1);  // a reshape may have copied: keep it alive
  out.temporaries[1] = std::move(mat2);
  if (bias != nullptr) add_key(out, args->self);
  add_key(out, args->mat1);
  add_key(out, args->mat2);
  out.strided = !args->mat1.is_contiguous() || !args->mat2.is_contiguous();
  // linear and the out= overloads look their configs up as the GEMM they run (addmm or mm),
  // under which ka-tune stores them.
  const char* gemm = bias != nullptr ? "aten::addmm" : "aten::mm";
  finish_pack(out, args, OpKind::kGemm, gemm,
              g.kind == FusionKind::kGemmEpilogue ? "fused::gemm_epilogue" : gemm);
}

// aten::matmul as a bmm (Note [matmul on ka]): the batched views of its operands, and the
// shape of its result.
struct BatchedMatmul {
  at::Tensor a;
  at::Tensor b;
  std::vector<std::int64_t> result_shape;
};

BatchedMatmul batched_matmul(const OpSpec& op, const at::Tensor& a, const at::Tensor& b) {
  const auto refuse = [&](const std::string& why) {
    KA_THROW(NotImplementedError, op.signature, ": ", why, " (", c10::str(a.sizes()), " @ ",
             c10::str(b.sizes()), "); libtorch runs it");
  };
  if (a.dim() < 3 || a.dim() != b.dim()) refuse("ka runs matmul of two tensors of one rank >= 3");
  for (std::int64_t d = 0; d + 2 < a.dim(); ++d) {
    if (a.size(d) != b.size(d)) refuse("ka does not broadcast matmul's batch dimensions");
  }
  if (a.size(-1) != b.size(-2)) {
    fail(op, "size mismatch: " + c10::str(a.sizes()) + " @ " + c10::str(b.sizes()));
  }
  auto a3 = as_batched_matrices(a);
  auto b3 = as_batched_matrices(b);
  if (!a3 || !b3) refuse("the batch dimensions cannot be viewed as one");
  std::vector<std::int64_t> shape(a.sizes().begin(), a.sizes().end());
  shape.back() = b.size(-1);
  return {std::move(*a3), std::move(*b3), std::move(shape)};
}

void pack_bmm(const GroupArgs& g, ParamBuffer& buf, Packed& out) {
  const NodeArgs& n = g.nodes[0];
  check_arity(n);
  const OpSpec& op = *n.spec;
  const at::Tensor& self = tensor_arg(n, 0, "self", out.device);
  const at::Tensor& other = tensor_arg(n, 1, op.id == kMatmulId ? "other" : "mat2", out.device);
  std::optional<BatchedMatmul> matmul;
  if (op.id == kMatmulId) matmul = batched_matmul(op, self, other);
  const at::Tensor& a = matmul ? matmul->a : self;
  const at::Tensor& b = matmul ? matmul->b : other;
  if (a.dim() != 3) fail(op, "batch1 must be a 3D tensor, got " + c10::str(a.sizes()));
  if (b.dim() != 3) fail(op, "batch2 must be a 3D tensor, got " + c10::str(b.sizes()));
  if (a.size(0) != b.size(0) || a.size(2) != b.size(1)) {
    fail(op, "Expected size for first two dimensions of batch2 tensor to be: [" +
                 std::to_string(a.size(0)) + ", " + std::to_string(a.size(2)) + "] but got: [" +
                 std::to_string(b.size(0)) + ", " + std::to_string(b.size(1)) + "].");
  }
  auto* args = buf.emplace<kernels::BmmArgs>();
  const at::Tensor result = allocate({a.size(0), a.size(1), b.size(2)}, out.device);
  out.result = matmul ? result.view(matmul->result_shape) : result;
  args->out = to_view(result);
  args->mat1 = to_view(a);
  args->mat2 = to_view(b);
  add_range(out, a, Access::kRead);
  add_range(out, b, Access::kRead);
  add_range(out, result, Access::kWrite);
  add_key(out, args->mat1);
  add_key(out, args->mat2);
  out.strided = !args->mat1.is_contiguous() || !args->mat2.is_contiguous();
  finish_pack(out, args, OpKind::kBmm, "aten::bmm", "aten::bmm");
}

// ---- row reductions with a prologue -------------------------------------------------------

// The reduction node of a (possibly fused) group, and the prologue that produces its input.
const at::Tensor& pack_prologue(const GroupArgs& g, kernels::EwProgram& program, EwInputs& in,
                                Device device) {
  const NodeArgs& red = g.nodes[g.count - 1];
  check_arity(red);
  if (g.count > 1) {
    in = pack_chain(g, g.count - 1, program, device);
    return *in.tensors[0];  // shape comes from the broadcast; see callers
  }
  const at::Tensor& x = tensor_arg(red, 0, "self", device);
  program.set_result(program.input(in.index_of(*red.spec, x)));
  return x;
}

void pack_softmax(const GroupArgs& g, ParamBuffer& buf, Packed& out) {
  const NodeArgs& red = g.nodes[g.count - 1];
  const OpSpec& op = *red.spec;
  auto* args = buf.emplace<kernels::SoftmaxArgs>();
  EwInputs in;
  pack_prologue(g, args->prologue, in, out.device);
  if (op.id == 16) {
    if (red.args[2]->isBool() && red.args[2]->toBool()) {
      fail(op, "conversion from Half to Float is only supported on CUDA (half_to_float=True)");
    }
  } else {
    check_dtype_arg(red, 2);
  }
  const c10::IntArrayRef shape(in.sizes.data(), static_cast<std::size_t>(in.ndim));
  const std::int64_t dim = wrap_dim(op, int_arg(red, 1, "dim"), in.ndim);
  out.result = allocate(shape, out.device);
  args->out = to_view(out.result);
  if (in.ndim == 0) args->out = kernels::TensorView::contiguous(args->out.data, DType::kFloat32,
                                                                 args->out.device, {1});
  args->dim = static_cast<int>(in.ndim == 0 ? 0 : dim);
  fill_inputs(in, out.result, args->inputs, out);
  if (in.ndim == 0) {
    for (int i = 0; i < in.count; ++i) {
      args->inputs[static_cast<std::size_t>(i)] = kernels::TensorView::make(
          args->inputs[static_cast<std::size_t>(i)].data, DType::kFloat32, out.device, {1}, {0});
    }
  }
  add_range(out, out.result, Access::kWrite);
  // softmax.int of an fp32 tensor is _softmax (no dtype cast): keyed and looked up as it, so
  // ka-tune's aten::_softmax rows serve it.
  const char* softmax = "aten::_softmax";
  finish_pack(out, args, OpKind::kSoftmax, softmax,
              g.count > 1 ? "fused::pointwise_softmax" : softmax);
}

// ---- attention -----------------------------------------------------------------------------

// Note [Packing attention]
// The group is bmm|matmul(q, kᵀ) -> [mul|div.Scalar(·, s), or mul|div.Tensor by a 0-dim
// constant s (Note [Scale by a 0-dim tensor])] -> [add.Tensor(·, mask), alpha 1, or a fill
// by a bool mask (Note [Attention's fill])] -> _softmax|softmax.int(·, last dim) ->
// [to|type_as (Note [Identity casts])] -> bmm|matmul(·, v) (FusionKind::kAttention). The
// kernel takes q, kᵀ and v as they are, any strides and the batch dimensions unmerged, so
// heads split by view and transpose need no copy (at batch > 1 too, where matmul alone cannot
// run as a bmm), and the mask expanded to the scores' shape (stride 0 where it broadcasts).
// What the kernel does not do — batch dimensions that differ or broadcast, a softmax over
// another dim, a mask that would broadcast the scores up, alpha != 1, a size mismatch — is
// refused as NotImplementedError: the group's nodes then run one by one, and a real error is
// reported by the node it belongs to. A division by s is a multiplication by 1/s inside the
// kernel (the micro-kernel's alpha): results differ from ATen's division by an ulp or so.

// Note [Attention's fill]
// The scores' fill by a bool mask is written three ways: masked_fill(scores, mask, value)
// sets value where the mask is true; where(cond, scores, value) sets it where cond is false
// (Hugging Face's GPT-2 applies its causal mask so), and where(cond, value, scores) where cond
// is true. The value is a number, or a 0-dim tensor whose value is known while extracting
// (masked_fill.Tensor, where.self: `torch.full([], torch.finfo(dtype).min)`), read then.
// The kernel takes the mask as it is and which of its values fills (AttentionArgs::
// fill_where_false): the mask may be computed in the same run, so no inverted copy is made.
struct ScoresFill {
  at::Tensor mask;
  double value = 0.0;
  bool where_false = false;
};

// The bool mask of a fill (argument `arg`): a bool tensor on the group's device.
const at::Tensor& bool_mask_arg(const NodeArgs& n, int arg, Device device) {
  const c10::IValue& v = *n.args[arg];
  KA_CHECK_TYPE(NotImplementedError, v.isTensor() && v.toTensor().defined() &&
                                         v.toTensor().scalar_type() == at::kBool,
                n.spec->signature, ": not fused as attention: the mask is not a bool tensor");
  const at::Tensor& t = v.toTensor();
  KA_CHECK_TYPE(NotImplementedError, is_on(t.device(), device), n.spec->signature,
                ": not fused as attention: the mask is on ", t.device().str());
  return t;
}

// The value of argument `arg`, a floating 0-dim CPU tensor read while extracting: it must
// hold its final data then (NodeArgs::fixed_args). `what` names it in the refusal.
double zero_dim_value(const NodeArgs& n, int arg, const char* what) {
  const c10::IValue& v = *n.args[arg];
  const bool ok = ((n.fixed_args >> arg) & 1U) != 0 && v.isTensor() && v.toTensor().defined() &&
                  v.toTensor().dim() == 0 && at::isFloatingType(v.toTensor().scalar_type()) &&
                  v.toTensor().is_cpu();
  KA_CHECK_TYPE(NotImplementedError, ok, n.spec->signature, ": not fused as attention: the ",
                what, " is not a floating 0-dim CPU tensor whose value is known while extracting");
  return v.toTensor().item<double>();
}

// The value of a scale node's 0-dim operand (the one that is not the chain link).
double zero_dim_scale(const NodeArgs& n) {
  return zero_dim_value(n, n.link_arg == 0 ? 1 : 0, "scale");
}

// The fill of a masked_fill or where node whose scores are its chain link (Note [Attention's
// fill]).
ScoresFill scores_fill(const NodeArgs& n, Device device) {
  const int id = n.spec->id;
  const bool masked_fill = id == kMaskedFillId || id == kMaskedFillTensorId;
  const bool link_ok = masked_fill ? n.link_arg == 0
                                   : (n.link_arg == 1 && id != kWhereScalarSelfId) ||
                                         (n.link_arg == 2 && id != kWhereScalarOtherId);
  KA_CHECK_TYPE(NotImplementedError, link_ok, n.spec->signature,
                ": not fused as attention: the scores are not the tensor it fills");
  ScoresFill f;
  f.where_false = !masked_fill && n.link_arg == 1;
  f.mask = bool_mask_arg(n, masked_fill ? 1 : 0, device);
  const int value_arg = masked_fill ? 2 : 3 - n.link_arg;
  const char* name = masked_fill ? "value" : value_arg == 1 ? "self" : "other";
  f.value = n.args[value_arg]->isTensor() ? zero_dim_value(n, value_arg, "fill value")
                                          : scalar_arg(n, value_arg, name);
  return f;
}

// Note [Identity casts]
// `probs.type(v.dtype)` or `.to(q.dtype)` between attention's softmax and its second product
// (Hugging Face's GPT-2 and LLaMA write one) casts ka's float32 probabilities to float32 on
// their own device: the identity, so the group keeps it and computes nothing for it. Any
// other dtype or device is refused, and the nodes run one by one. copy=True, non_blocking and
// a memory format change nothing here: the probabilities never materialise, so only the
// values matter.
void check_identity_cast(const NodeArgs& n, Device device) {
  const auto refuse = [&](const std::string& why) {
    KA_THROW(NotImplementedError, n.spec->signature, ": not fused as attention: ", why);
  };
  const auto dtype_is_float = [&](int arg) {
    const c10::IValue& v = *n.args[arg];
    if (v.isNone()) return;
    if (!v.isInt()) refuse(std::string("its dtype is a ") + v.tagKind());
    const auto type = static_cast<at::ScalarType>(v.toInt());
    if (type != at::kFloat) refuse(std::string("it casts to ") + c10::toString(type) + ", not float32");
  };
  const auto device_is_own = [&](const c10::IValue& v) {
    if (v.isNone()) return;
    if (!v.isDevice() || !is_on(v.toDevice(), device)) {
      refuse("it moves the probabilities to another device");
    }
  };
  const auto like_other = [&]() {
    const c10::IValue& v = *n.args[1];
    if (!v.isTensor() || !v.toTensor().defined()) refuse("'other' is not a tensor");
    const at::Tensor& t = v.toTensor();
    if (t.scalar_type() != at::kFloat) {
      refuse(std::string("it casts to ") + c10::toString(t.scalar_type()) + ", not float32");
    }
    device_is_own(c10::IValue(t.device()));
  };
  switch (n.spec->id) {
    case kToDtypeId:
      dtype_is_float(1);
      return;
    case kToDeviceId:
      device_is_own(*n.args[1]);
      dtype_is_float(2);
      return;
    case kToDtypeLayoutId: {
      dtype_is_float(1);
      const c10::IValue& layout = *n.args[2];
      if (!layout.isNone() && (!layout.isInt() || layout.toInt() != static_cast<int>(at::kStrided))) {
        refuse("it changes the layout");
      }
      device_is_own(*n.args[3]);
      return;
    }
    case kToOtherId:
    case kTypeAsId:
      like_other();
      return;
    default:
      refuse("not a cast");
  }
}

void pack_attention(const GroupArgs& g, ParamBuffer& buf, Packed& out) {
  for (int k = 0; k < g.count; ++k) check_arity(g.nodes[k]);
  const NodeArgs& first = g.nodes[0];
  int softmax_at = 1;
  while (softmax_at < g.count && g.nodes[softmax_at].spec->kind != OpKind::kSoftmax) ++softmax_at;
  KA_ASSERT(softmax_at + 1 < g.count, "attention group without softmax");
  const NodeArgs& softmax = g.nodes[softmax_at];
  const NodeArgs& last = g.nodes[g.count - 1];
  const auto refuse = [](const NodeArgs& n, const std::string& why) {
    KA_THROW(NotImplementedError, n.spec->signature, ": not fused as attention: ", why);
  };
  const auto second = [](const NodeArgs& n) { return n.spec->id == kMatmulId ? "other" : "mat2"; };
  const at::Tensor& q = tensor_arg(first, 0, "self", out.device);
  const at::Tensor& kt = tensor_arg(first, 1, second(first), out.device);
  const at::Tensor& v = tensor_arg(last, 1, second(last), out.device);
  const std::int64_t nd = q.dim();
  const auto shapes = [&] {
    return c10::str(q.sizes()) + " @ " + c10::str(kt.sizes()) + ", then @ " + c10::str(v.sizes());
  };
  if (nd < 3 || nd > kernels::TensorView::kMaxDims || kt.dim() != nd || v.dim() != nd) {
    refuse(first, "expected operands of one rank from 3 to 8 (" + shapes() + ")");
  }
  for (std::int64_t d = 0; d + 2 < nd; ++d) {
    if (kt.size(d) != q.size(d) || v.size(d) != q.size(d)) {
      refuse(first, "batch dimensions differ or broadcast (" + shapes() + ")");
    }
  }
  if (q.size(-1) != kt.size(-2) || kt.size(-1) != v.size(-2)) {
    refuse(first, "size mismatch (" + shapes() + ")");
  }
  double scale = 1.0;
  at::Tensor mask;
  at::Tensor fill_mask;
  double fill_value = 0.0;
  bool fill_where_false = false;
  for (int k = softmax_at + 1; k + 1 < g.count; ++k) check_identity_cast(g.nodes[k], out.device);
  for (int k = 1; k < softmax_at; ++k) {
    const NodeArgs& n = g.nodes[k];
    if (n.spec->id == kMulScalarId || n.spec->id == kDivScalarId) {
      const double s = scalar_arg(n, 1, "other");
      scale = n.spec->id == kMulScalarId ? scale * s : scale / s;
      continue;
    }
    if (n.spec->id == kMulTensorId || n.spec->id == kDivTensorId) {
      const double s = zero_dim_scale(n);
      scale = n.spec->id == kMulTensorId ? scale * s : scale / s;
      continue;
    }
    if (n.spec->kind == OpKind::kMaskedFill) {
      ScoresFill f = scores_fill(n, out.device);
      fill_mask = std::move(f.mask);
      fill_value = f.value;
      fill_where_false = f.where_false;
      continue;
    }
    if (scalar_arg(n, 2, "alpha") != 1.0) refuse(n, "alpha != 1");
    mask = tensor_arg(n, n.link_arg == 0 ? 1 : 0, "other", out.device);
  }
  if (softmax.spec->id == kSoftmaxId) {
    if (softmax.args[2]->isBool() && softmax.args[2]->toBool()) refuse(softmax, "half_to_float");
  } else {
    check_dtype_arg(softmax, 2);
  }
  if (wrap_dim(*softmax.spec, int_arg(softmax, 1, "dim"), nd) != nd - 1) {
    refuse(softmax, "softmax over a dimension other than the last");
  }
  std::vector<std::int64_t> scores(q.sizes().begin(), q.sizes().end());
  scores.back() = kt.size(-1);
  for (at::Tensor* m : {&mask, &fill_mask}) {
    if (!m->defined()) continue;
    bool fits = m->dim() <= nd;
    for (std::int64_t d = 1; fits && d <= m->dim(); ++d) {
      const std::int64_t size = m->size(-d);
      fits = size == 1 || size == scores[static_cast<std::size_t>(nd - d)];
    }
    if (!fits) {
      refuse(g.nodes[softmax_at - 1], "mask " + c10::str(m->sizes()) +
                                       " does not broadcast to the scores " + c10::str(scores));
    }
    *m = m->expand(scores);
  }
  std::vector<std::int64_t> shape(q.sizes().begin(), q.sizes().end());
  shape.back() = v.size(-1);
  out.result = allocate(shape, out.device);
  auto* args = buf.emplace<kernels::AttentionArgs>();
  args->out = to_view(out.result);
  args->query = to_view(q);
  args->key_t = to_view(kt);
  args->value = to_view(v);
  args->scale = static_cast<float>(scale);
  for (const at::Tensor* t : {&q, &kt, &v}) add_range(out, *t, Access::kRead);
  add_key(out, args->query);
  add_key(out, args->key_t);
  add_key(out, args->value);
  if (mask.defined()) {
    args->mask = to_view(mask);
    add_range(out, mask, Access::kRead);
    add_key(out, args->mask);
  }
  if (fill_mask.defined()) {
    args->fill_mask = to_view(fill_mask);
    args->fill_value = static_cast<float>(fill_value);
    args->fill_where_false = fill_where_false;
    add_range(out, fill_mask, Access::kRead);
    add_key(out, args->fill_mask);
  }
  add_range(out, out.result, Access::kWrite);
  out.strided = !args->query.is_contiguous() || !args->key_t.is_contiguous() ||
                !args->value.is_contiguous();
  out.temporaries[0] = std::move(mask);  // the expanded views the kernel reads
  out.temporaries[1] = std::move(fill_mask);
  finish_pack(out, args, OpKind::kAttention, "fused::attention", "fused::attention");
}

void pack_layer_norm(const GroupArgs& g, ParamBuffer& buf, Packed& out) {
  const NodeArgs& red = g.nodes[g.count - 1];
  const OpSpec& op = *red.spec;
  auto* args = buf.emplace<kernels::LayerNormArgs>();
  EwInputs in;
  pack_prologue(g, args->prologue, in, out.device);
  const c10::IValue& ns = *red.args[1];
  if (!ns.isIntList()) fail(op, "argument 'normalized_shape' must be a list of ints");
  const std::vector<std::int64_t> normalized = ns.toIntVector();
  const c10::IntArrayRef shape(in.sizes.data(), static_cast<std::size_t>(in.ndim));
  const auto nd = static_cast<int>(normalized.size());
  bool ok = nd >= 1 && nd <= in.ndim;
  for (int i = 0; ok && i < nd; ++i) {
    ok = normalized[static_cast<std::size_t>(i)] == shape[static_cast<std::size_t>(in.ndim - nd + i)];
  }
  if (!ok) {
    fail(op, "Given normalized_shape=" + c10::str(c10::IntArrayRef(normalized)) +
                 ", expected input with shape [*, " +
                 c10::str(c10::IntArrayRef(normalized)).substr(1) + ", but got input of size" +
                 c10::str(shape));
  }
  const at::Tensor* weight = optional_tensor_arg(red, 2, "weight", out.device);
  const at::Tensor* bias = optional_tensor_arg(red, 3, "bias", out.device);
  for (const at::Tensor* t : {weight, bias}) {
    if (t != nullptr && t->sizes() != c10::IntArrayRef(normalized)) {
      fail(op, std::string(t == weight ? "weight" : "bias") + " of shape " + c10::str(t->sizes()) +
                   " does not match normalized_shape " + c10::str(c10::IntArrayRef(normalized)));
    }
  }
  args->eps = static_cast<float>(scalar_arg(red, 4, "eps"));
  args->normalized_dims = nd;
  out.result = allocate(shape, out.device);
  args->out = to_view(out.result);
  fill_inputs(in, out.result, args->inputs, out);
  if (weight != nullptr) {
    args->weight = to_view(*weight);
    add_range(out, *weight, Access::kRead);
    add_key(out, args->weight);
  }
  if (bias != nullptr) {
    args->bias = to_view(*bias);
    add_range(out, *bias, Access::kRead);
    add_key(out, args->bias);
  }
  add_range(out, out.result, Access::kWrite);
  finish_pack(out, args, OpKind::kLayerNorm, op.signature,
              g.count > 1 ? "fused::pointwise_layer_norm" : op.signature);
}

void pack_sum(const GroupArgs& g, ParamBuffer& buf, Packed& out) {
  const NodeArgs& n = g.nodes[0];
  check_arity(n);
  const OpSpec& op = *n.spec;
  const at::Tensor& self = tensor_arg(n, 0, "self", out.device);
  const c10::IValue& dims = *n.args[1];
  const bool keepdim = n.args[2]->isBool() && n.args[2]->toBool();
  check_dtype_arg(n, 3);
  const auto ndim = static_cast<int>(self.dim());
  std::uint64_t mask = 0;
  if (dims.isNone() || (dims.isIntList() && dims.toIntList().empty())) {
    mask = ndim == 0 ? 0 : (std::uint64_t{1} << ndim) - 1;
  } else {
    if (!dims.isIntList()) fail(op, "argument 'dim' must be a list of ints");
    for (const std::int64_t d : dims.toIntVector()) {
      const std::int64_t w = wrap_dim(op, d, ndim);
      const std::uint64_t bit = std::uint64_t{1} << w;
      if ((mask & bit) != 0) fail(op, "dim " + std::to_string(w) + " appears multiple times in the list of dims");
      mask |= bit;
    }
  }
  if (ndim == 0) mask = 0;
  std::array<std::int64_t, kernels::TensorView::kMaxDims> kept{};
  std::array<std::int64_t, kernels::TensorView::kMaxDims> squeezed{};
  int ns = 0;
  for (int d = 0; d < ndim; ++d) {
    const bool reduced = (mask >> d) & 1U;
    kept[static_cast<std::size_t>(d)] = reduced ? 1 : self.size(d);
    if (!reduced) squeezed[static_cast<std::size_t>(ns++)] = self.size(d);
  }
  auto* args = buf.emplace<kernels::SumArgs>();
  at::Tensor result = allocate(c10::IntArrayRef(kept.data(), static_cast<std::size_t>(ndim)), out.device);
  args->out = to_view(result);
  args->in = to_view(self);
  args->reduce_mask = mask;
  if (ndim == 0) {
    args->out = kernels::TensorView::contiguous(args->out.data, DType::kFloat32, out.device, {1});
    args->in = kernels::TensorView::contiguous(args->in.data, DType::kFloat32, out.device, {1});
  }
  out.result = keepdim ? result : result.view(c10::IntArrayRef(squeezed.data(), static_cast<std::size_t>(ns)));
  add_range(out, self, Access::kRead);
  add_range(out, result, Access::kWrite);
  add_key(out, to_view(self));
  out.strided = !args->in.is_contiguous();
  finish_pack(out, args, OpKind::kSum, op.signature,
              op.signature);
}

// ---- shape propagation ------------------------------------------------------------------

// Broadcasts `acc` with `sizes` (PyTorch's rules) in place; false when they do not broadcast.
bool broadcast_into(Sizes& acc, const Sizes& sizes) {
  if (sizes.size() > acc.size()) acc.insert(acc.begin(), sizes.size() - acc.size(), 1);
  const std::size_t offset = acc.size() - sizes.size();
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    std::int64_t& a = acc[offset + i];
    if (a == sizes[i] || sizes[i] == 1) continue;
    if (a != 1) return false;
    a = sizes[i];
  }
  return true;
}

// sum.dim_IntList's result sizes: `in` with the listed dims (all for an empty list) removed,
// or kept as 1 with keepdim.
std::optional<Sizes> sum_sizes(const Sizes& in, const c10::IValue& dims, bool keepdim) {
  const auto ndim = static_cast<std::int64_t>(in.size());
  std::vector<bool> reduced(in.size(), dims.isNone() || (dims.isIntList() && dims.toIntList().empty()));
  if (!dims.isNone() && !dims.isIntList()) return std::nullopt;
  if (dims.isIntList()) {
    const std::int64_t n = std::max<std::int64_t>(ndim, 1);
    for (std::int64_t d : dims.toIntVector()) {
      if (d < -n || d >= n) return std::nullopt;
      d = d < 0 ? d + n : d;
      if (d < ndim) reduced[static_cast<std::size_t>(d)] = true;
    }
  }
  Sizes out;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (!reduced[i]) out.push_back(in[i]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

}  // namespace

std::optional<Sizes> output_sizes(const OpSpec& spec, const c10::IValue* const* args,
                                  const Sizes* const* tensor_sizes) {
  switch (spec.kind) {
    case OpKind::kElementwise: {
      Sizes out;
      for (const std::int8_t a : spec.tensor_args) {
        if (a < 0) continue;
        if (tensor_sizes[a] == nullptr || !broadcast_into(out, *tensor_sizes[a])) return std::nullopt;
      }
      return out;
    }
    case OpKind::kGemm: {
      const GemmForm form = gemm_form(spec);
      const int lhs = form == GemmForm::kAddmm ? 1 : 0;
      const Sizes* x = tensor_sizes[lhs];
      const Sizes* w = tensor_sizes[lhs + 1];
      if (x == nullptr || w == nullptr || w->size() != 2) return std::nullopt;
      if (form == GemmForm::kLinear) {
        if (x->empty()) return std::nullopt;
        Sizes out(x->begin(), x->end() - 1);
        out.push_back((*w)[0]);
        return out;
      }
      if (x->size() != 2) return std::nullopt;
      return Sizes{(*x)[0], (*w)[1]};
    }
    case OpKind::kBmm: {
      const Sizes* a = tensor_sizes[0];
      const Sizes* b = tensor_sizes[1];
      if (a == nullptr || b == nullptr || a->size() != b->size() || a->size() < 3) {
        return std::nullopt;
      }
      if (spec.id != kMatmulId && a->size() != 3) return std::nullopt;
      Sizes out(*a);
      out.back() = b->back();
      return out;
    }
    case OpKind::kSoftmax:
    case OpKind::kLayerNorm:
      if (tensor_sizes[0] == nullptr) return std::nullopt;
      return *tensor_sizes[0];
    case OpKind::kSum:
      if (tensor_sizes[0] == nullptr) return std::nullopt;
      return sum_sizes(*tensor_sizes[0], *args[1], args[2]->isBool() && args[2]->toBool());
    case OpKind::kIdentityCast:
      if (tensor_sizes[0] == nullptr) return std::nullopt;
      return *tensor_sizes[0];
    case OpKind::kMaskedFill: {
      // masked_fill: self's shape; where: its three operands broadcast.
      const bool where = spec.id != kMaskedFillId && spec.id != kMaskedFillTensorId;
      if (!where) {
        if (tensor_sizes[0] == nullptr) return std::nullopt;
        return *tensor_sizes[0];
      }
      Sizes out;
      bool any = false;
      for (int a = 0; a < 3; ++a) {
        if (!args[a]->isTensor()) continue;
        if (tensor_sizes[a] == nullptr || !broadcast_into(out, *tensor_sizes[a])) return std::nullopt;
        any = true;
      }
      return any ? std::optional<Sizes>(out) : std::nullopt;
    }
    case OpKind::kAttention:
      break;  // no op's own kind
  }
  return std::nullopt;
}

const std::array<OpSpec, kNumOps>& op_specs() { return kSpecs; }

const OpSpec* find_spec(std::string_view signature) noexcept {
  for (const OpSpec& s : kSpecs) {
    if (signature == s.signature) return &s;
  }
  return nullptr;
}

MemRange range_of(const at::Tensor& t, Access access) {
  MemRange r;
  const auto& d = t.device();
  r.device = d.is_cuda() ? Device::cuda(d.index()) : Device::cpu();
  r.access = access;
  if (t.numel() == 0) return r;
  std::int64_t lo = 0;
  std::int64_t hi = 0;
  for (std::int64_t i = 0; i < t.dim(); ++i) {
    const std::int64_t span = (t.size(i) - 1) * t.stride(i);
    (span < 0 ? lo : hi) += span;
  }
  const auto elem = static_cast<std::int64_t>(t.element_size());
  r.base = reinterpret_cast<std::uintptr_t>(t.data_ptr()) + static_cast<std::uintptr_t>(lo * elem);
  r.bytes = static_cast<std::size_t>((hi - lo + 1) * elem);
  return r;
}

Device group_device(const GroupArgs& g) {
  for (int k = 0; k < g.count; ++k) {
    const NodeArgs& n = g.nodes[k];
    for (int i = 0; i < n.num_args; ++i) {
      if (i == n.link_arg || !n.args[i]->isTensor()) continue;
      const at::Tensor& t = n.args[i]->toTensor();
      if (!t.defined()) continue;
      if (t.device().is_cpu()) return Device::cpu();
      if (t.device().is_cuda()) return Device::cuda(t.device().index());
      KA_THROW(NotImplementedError, n.spec->signature, ": kernel not found for ",
               n.spec->signature, " on ", t.device().str(), " (ka has cpu and cuda kernels)");
    }
  }
  KA_THROW(ValueError, g.nodes[0].spec->signature, ": no tensor argument to place the call");
}

void pack_group(const GroupArgs& g, ParamBuffer& buffer, Packed& out) {
  KA_ASSERT(g.count >= 1, "empty fusion group");
  out.device = group_device(g);
  if (g.kind == FusionKind::kAttention) return pack_attention(g, buffer, out);
  switch (g.nodes[g.count - 1].spec->kind) {
    case OpKind::kElementwise:
      if (g.kind == FusionKind::kGemmEpilogue) break;
      return pack_elementwise(g, buffer, out);
    case OpKind::kSoftmax:
      return pack_softmax(g, buffer, out);
    case OpKind::kLayerNorm:
      return pack_layer_norm(g, buffer, out);
    case OpKind::kSum:
      return pack_sum(g, buffer, out);
    case OpKind::kBmm:
      return pack_bmm(g, buffer, out);
    case OpKind::kGemm:
      break;
    case OpKind::kMaskedFill:
    case OpKind::kIdentityCast:
      KA_THROW(NotImplementedError, g.nodes[0].spec->signature,
               ": ka runs it only inside a fused attention");
    case OpKind::kAttention:
      KA_ASSERT(false, "no op has the attention kind");
  }
  return pack_gemm(g, buffer, out);
}

}  // namespace ka::extractor::detail
