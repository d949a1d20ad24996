// Device pieces shared by the CUDA element-wise, reduction and GEMM kernels: the EwProgram
// evaluator, the activations with ATen's fp32 semantics, strided layouts with collapsed
// dimensions and the kernels' common plumbing. Included by the kernels' headers (and through
// them by the .cu launchers and the host-emulated tests); the evaluator and Layout::offsets
// are also host functions so that host code can check them against EwProgram::eval.
#pragma once

#include <ka/core/error.hpp>
#include <ka/kernels/elementwise.hpp>
#include <ka/kernels/gemm.hpp>
#include <ka/kernels/tensor_view.hpp>

#include <cuda_runtime.h>

#include <cstdint>

// __noinline__ for device functions; host compilers (tests/support/simt_host.hpp) get GCC's
// attribute, as defining __noinline__ itself would break libstdc++'s __attribute__((__noinline__)).
#if defined(__CUDACC__)
#define KA_DEVICE_NOINLINE __noinline__
#else
#define KA_DEVICE_NOINLINE __attribute__((noinline))
#endif

namespace ka::kernels::cuda_detail {

// ---- activations (ATen fp32 semantics, see EwOp) ---------------------------------------------

__host__ __device__ __forceinline__ float relu(float x) { return (x > 0.0F || x != x) ? x : 0.0F; }

__host__ __device__ __forceinline__ float gelu_erf(float x) {
  return 0.5F * x * (1.0F + erff(x * 0.70710678118654752440F));
}

__host__ __device__ __forceinline__ float gelu_tanh(float x) {
  constexpr float kBeta = 0.79788456080286535588F;  // sqrt(2/pi)
  constexpr float kKappa = 0.044715F;
  const float inner = kBeta * (x + kKappa * x * x * x);
  return 0.5F * x * (1.0F + tanhf(inner));
}

__host__ __device__ __forceinline__ float sigmoid(float x) { return 1.0F / (1.0F + expf(-x)); }

__host__ __device__ __forceinline__ float silu(float x) { return x / (1.0F + expf(-x)); }

// NaN-propagating maximum, as aten::maximum.
__host__ __device__ __forceinline__ float max_nan(float a, float b) {
  if (a != a) return a;
  if (b != b) return b;
  return a > b ? a : b;
}

__host__ __device__ __forceinline__ float apply_epilogue(Epilogue e, float x) {
  switch (e) {
    case Epilogue::kNone:
      return x;
    case Epilogue::kRelu:
      return relu(x);
    case Epilogue::kGelu:
      return gelu_erf(x);
    case Epilogue::kGeluTanh:
      return gelu_tanh(x);
    case Epilogue::kSigmoid:
      return sigmoid(x);
    case Epilogue::kSilu:
      return silu(x);
  }
  return x;
}

// ---- the program evaluator --------------------------------------------------------------------

// std::array's accessors are host constexpr functions; device code reads the underlying array
// (std::array<T, N> is an aggregate whose only member is T[N]).
__host__ __device__ __forceinline__ const EwInstr* instrs(const EwProgram& p) {
  return reinterpret_cast<const EwInstr*>(&p.code);
}

/// Evaluates `p` for one element with input values `in` (the device twin of EwProgram::eval).
/// Pass `p` from a __grid_constant__ kernel parameter so it stays in the constant bank.
__host__ __device__ __forceinline__ float eval_program(const EwProgram& p, const float* in) {
  float r[EwProgram::kMaxRegs];
  const EwInstr* code = instrs(p);
  for (int i = 0; i < p.size; ++i) {
    const EwInstr ins = code[i];
    const float a = r[ins.a];
    float v = 0.0F;
    switch (ins.op) {
      case EwOp::kInput:
        v = in[ins.a];
        break;
      case EwOp::kScalar:
        v = ins.imm;
        break;
      case EwOp::kAdd:
        v = a + r[ins.b];
        break;
      case EwOp::kSub:
        v = a - r[ins.b];
        break;
      case EwOp::kMul:
        v = a * r[ins.b];
        break;
      case EwOp::kDiv:
        v = a / r[ins.b];
        break;
      case EwOp::kMax:
        v = max_nan(a, r[ins.b]);
        break;
      case EwOp::kNeg:
        v = -a;
        break;
      case EwOp::kExp:
        v = expf(a);
        break;
      case EwOp::kTanh:
        v = tanhf(a);
        break;
      case EwOp::kRelu:
        v = relu(a);
        break;
      case EwOp::kGelu:
        v = gelu_erf(a);
        break;
      case EwOp::kGeluTanh:
        v = gelu_tanh(a);
        break;
      case EwOp::kSigmoid:
        v = sigmoid(a);
        break;
      case EwOp::kSilu:
        v = silu(a);
        break;
    }
    r[ins.dst] = v;
  }
  return r[p.result];
}

// ---- kernel plumbing shared by the element-wise and row kernels -------------------------------

/// The inputs a program reads at most.
constexpr int kMaxInputs = EwProgram::kMaxInputs;

/// Every kernel must launch at its space's largest block: (1024, 1) caps registers at 64.
/// (With the thread count alone ptxas aimed for 32 and spilled.)
constexpr int kMaxBlockThreads = 1024;

/// The inputs of an element-wise program, passed by value to kernels.
struct InputPtrs {
  const float* p[kMaxInputs];
};

/// eval_program, not inlined: kernels evaluate the program at several unrolled sites, and one
/// copy of the interpreter keeps compile time and instruction cache footprint small.
__device__ KA_DEVICE_NOINLINE inline float eval_at(const EwProgram& prog, const float* in) {
  return eval_program(prog, in);
}

// A 16-byte vector access; tests/support/simt_host.hpp checks its alignment, which a GPU
// faults on and a CPU forgives.
#ifndef KA_SIMT_VECTOR_ALIGNED
#define KA_SIMT_VECTOR_ALIGNED(p) static_cast<void>(0)
#endif

__device__ __forceinline__ float4 load_float4(const float* p) {
  KA_SIMT_VECTOR_ALIGNED(p);
  return *reinterpret_cast<const float4*>(p);
}

__device__ __forceinline__ void store_float4(float* p, float4 v) {
  KA_SIMT_VECTOR_ALIGNED(p);
  *reinterpret_cast<float4*>(p) = v;
}

// ---- strided layouts ---------------------------------------------------------------------------

/// Tensors one layout can walk: out, the program's inputs and (layer_norm) weight and bias.
constexpr int kMaxTensors = EwProgram::kMaxInputs + 3;

/// Up to kMaxTensors tensors sharing one iteration shape, dimensions stored innermost first and
/// collapsed where every tensor is dense across them. Passed by value to kernels.
struct Layout {
  int ndim = 0;
  int tensors = 0;
  long long sizes[TensorView::kMaxDims] = {};
  long long strides[kMaxTensors][TensorView::kMaxDims] = {};

  /// Offsets (in elements) of every tensor at the linear (row-major) index `linear`. `Index`
  /// is the type of the division: unsigned when the index space fits 32 bits (several times
  /// cheaper on the GPU than 64-bit division), long long otherwise.
  template <typename Index = long long>
  __host__ __device__ __forceinline__ void offsets(Index linear, long long* off) const {
    for (int t = 0; t < tensors; ++t) off[t] = 0;
    for (int d = 0; d < ndim; ++d) {
      Index idx = linear;
      if (d + 1 < ndim) {
        const auto size = static_cast<Index>(sizes[d]);
        idx = linear % size;
        linear /= size;
      }
      for (int t = 0; t < tensors; ++t) off[t] += static_cast<long long>(idx) * strides[t][d];
    }
  }
};

/// Builds a Layout over the dimensions of `views` whose bit is set in `dims` (every view has
/// at least `ndim` dims and the sizes of views[0] there), dropping size-1 dims and merging
/// neighbours that every tensor walks densely (as ATen's TensorIterator::coalesce_dimensions).
/// No selected dimension yields ndim 0 (one element).
inline Layout make_layout(const TensorView* const* views, int count, int ndim, std::uint64_t dims) {
  KA_ASSERT(count <= kMaxTensors, "too many tensors for a layout: ", count);
  Layout l;
  l.tensors = count;
  for (int d = ndim - 1; d >= 0; --d) {  // innermost first
    if (((dims >> d) & 1U) == 0) continue;
    const long long size = views[0]->size(d);
    if (size == 1) continue;
    bool merge = l.ndim > 0;
    for (int t = 0; t < count && merge; ++t) {
      merge = views[t]->stride(d) == l.strides[t][l.ndim - 1] * l.sizes[l.ndim - 1];
    }
    if (merge) {
      l.sizes[l.ndim - 1] *= size;
      continue;
    }
    for (int t = 0; t < count; ++t) l.strides[t][l.ndim] = views[t]->stride(d);
    l.sizes[l.ndim] = size;
    ++l.ndim;
  }
  return l;
}

/// The mask selecting dimensions [first, last).
inline std::uint64_t dim_range(int first, int last) {
  std::uint64_t m = 0;
  for (int d = first; d < last; ++d) m |= 1ULL << d;
  return m;
}

/// Checks shared by the kernels taking an element-wise program: float32 CUDA tensors, inputs
/// with out's ndim and sizes (stride 0 where broadcast), a program reading only given inputs.
inline void validate_program_inputs(const char* what, const TensorView& out,
                                    const TensorView* inputs, const EwProgram& program) {
  KA_CHECK(program.size >= 1 && program.size <= EwProgram::kMaxInstrs, what, ": the program has ",
           program.size, " instructions");
  KA_CHECK(program.regs <= EwProgram::kMaxRegs && program.result >= 0 &&
               program.result < EwProgram::kMaxRegs,
           what, ": the program's registers are out of range");
  KA_CHECK(program.inputs >= 0 && program.inputs <= EwProgram::kMaxInputs, what,
           ": the program reads ", program.inputs, " inputs");
  KA_CHECK(out.dtype == DType::kFloat32, what, ": out has dtype ", long_name(out.dtype),
           "; this kernel takes float32");
  KA_CHECK(out.device.type == DeviceType::kCUDA, what, ": out is on ", out.device.str(),
           "; this kernel runs on cuda");
  KA_CHECK(out.ndim >= 0 && out.ndim <= TensorView::kMaxDims, what, ": out has ", out.ndim,
           " dims");
  for (int i = 0; i < program.inputs; ++i) {
    const TensorView& in = inputs[i];
    KA_CHECK(in.dtype == DType::kFloat32, what, ": input ", i, " has dtype ", long_name(in.dtype),
             "; this kernel takes float32");
    KA_CHECK(in.device.type == DeviceType::kCUDA, what, ": input ", i, " is on ", in.device.str(),
             "; this kernel runs on cuda");
    bool same = in.ndim == out.ndim;
    for (int d = 0; d < out.ndim && same; ++d) same = in.size(d) == out.size(d);
    KA_CHECK(same, what, ": input ", i, " has shape ", in.shape_str(), ", expected out's ",
             out.shape_str(), " (broadcast it with broadcast_view)");
    KA_CHECK(in.data != nullptr || out.numel() == 0, what, ": input ", i, " has no data");
  }
  // Exact aliasing (in-place) is fine: each element is read before it is written. A partial
  // overlap would read values already overwritten.
  const auto extent = [](const TensorView& t, std::uintptr_t& lo, std::uintptr_t& hi) {
    std::int64_t last = 0;
    for (int d = 0; d < t.ndim; ++d) last += (t.size(d) - 1) * t.stride(d);
    lo = reinterpret_cast<std::uintptr_t>(t.data);
    hi = lo + static_cast<std::uintptr_t>(last + 1) * sizeof(float);
  };
  if (out.numel() > 0) {
    std::uintptr_t out_lo = 0;
    std::uintptr_t out_hi = 0;
    extent(out, out_lo, out_hi);
    for (int i = 0; i < program.inputs; ++i) {
      const TensorView& in = inputs[i];
      std::uintptr_t lo = 0;
      std::uintptr_t hi = 0;
      extent(in, lo, hi);
      bool same = in.data == out.data;
      for (int d = 0; d < out.ndim && same; ++d) same = in.stride(d) == out.stride(d);
      KA_CHECK(lo >= out_hi || hi <= out_lo || same, what, ": input ", i,
               " partially overlaps out (only exact aliasing is allowed)");
    }
  }
  // Registers must be written before they are read; a malformed program would read garbage.
  const EwInstr* code = program.code.data();
  unsigned long long written = 0;
  for (int i = 0; i < program.size; ++i) {
    const EwInstr& ins = code[i];
    KA_CHECK(static_cast<int>(ins.op) <= static_cast<int>(EwOp::kSilu), what, ": instruction ", i,
             " has an unknown op");
    const bool reads_a = ins.op != EwOp::kInput && ins.op != EwOp::kScalar;
    const bool reads_b = ins.op == EwOp::kAdd || ins.op == EwOp::kSub || ins.op == EwOp::kMul ||
                         ins.op == EwOp::kDiv || ins.op == EwOp::kMax;
    if (ins.op == EwOp::kInput) {
      KA_CHECK(ins.a < program.inputs, what, ": instruction ", i, " reads input ",
               static_cast<int>(ins.a), " of ", program.inputs);
    }
    KA_CHECK(!reads_a || (ins.a < EwProgram::kMaxRegs && ((written >> ins.a) & 1ULL) != 0), what,
             ": instruction ", i, " reads unwritten register r", static_cast<int>(ins.a));
    KA_CHECK(!reads_b || (ins.b < EwProgram::kMaxRegs && ((written >> ins.b) & 1ULL) != 0), what,
             ": instruction ", i, " reads unwritten register r", static_cast<int>(ins.b));
    KA_CHECK(ins.dst < EwProgram::kMaxRegs, what, ": instruction ", i, " writes r",
             static_cast<int>(ins.dst));
    written |= 1ULL << ins.dst;
  }
  KA_CHECK(((written >> program.result) & 1ULL) != 0, what, ": the result register r",
           program.result, " is never written");
}

/// The stream argument of the *_cuda entry points.
inline cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

}  // namespace ka::kernels::cuda_detail
