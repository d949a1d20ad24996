// Element-wise kernels: one pass over the output evaluating a small register program, so a
// single op (aten::add.Tensor, aten::gelu, ...) and a fused chain of them are the same kernel.
#pragma once

#include <ka/core/launch_config.hpp>
#include <ka/core/shape_key.hpp>
#include <ka/core/status.hpp>
#include <ka/kernels/cpu_launch.hpp>
#include <ka/kernels/kernel_descriptor.hpp>
#include <ka/kernels/tensor_view.hpp>

#include <array>
#include <cstdint>
#include <string>

namespace ka::kernels {

/// The operations of an element-wise program. Semantics follow ATen's fp32 kernels:
/// kGelu = 0.5·x·(1 + erf(x/√2)), kGeluTanh = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))),
/// kSigmoid = 1/(1 + e^(−x)), kSilu = x·sigmoid(x), kRelu = max(x, 0) (NaN stays NaN).
enum class EwOp : std::uint8_t {
  kInput,   ///< dst = inputs[a] at this element (broadcast by stride 0)
  kScalar,  ///< dst = imm
  kAdd,     ///< dst = r[a] + r[b]
  kSub,     ///< dst = r[a] - r[b]
  kMul,     ///< dst = r[a] * r[b]
  kDiv,     ///< dst = r[a] / r[b]
  kMax,     ///< dst = max(r[a], r[b]) (NaN propagates)
  kNeg,     ///< dst = -r[a]
  kExp,     ///< dst = exp(r[a])
  kTanh,    ///< dst = tanh(r[a])
  kRelu,
  kGelu,
  kGeluTanh,
  kSigmoid,
  kSilu,
};

/// "add", "gelu_tanh", ... (for dumps and error messages).
const char* to_string(EwOp op) noexcept;

/// One instruction: registers dst, a, b (b unused by unary ops), an immediate for kScalar.
struct EwInstr {
  EwOp op = EwOp::kScalar;
  std::uint8_t dst = 0;
  std::uint8_t a = 0;
  std::uint8_t b = 0;
  float imm = 0.0F;
};

/// A straight-line program over registers: evaluated per element, its `result` register is
/// the output. Trivially copyable (it is passed by value to CUDA kernels). Built with the
/// helpers, which allocate a fresh register per value (SSA):
///
///   EwProgram p;                                   // out = gelu(x + 0.5 * y)
///   int x = p.input(0), y = p.input(1);
///   p.set_result(p.unary(EwOp::kGelu, p.binary(EwOp::kAdd, x,
///                p.binary(EwOp::kMul, y, p.scalar(0.5F)))));
struct EwProgram {
  static constexpr int kMaxInstrs = 32;
  static constexpr int kMaxRegs = 32;
  static constexpr int kMaxInputs = 8;

  std::array<EwInstr, kMaxInstrs> code{};
  int size = 0;     ///< Instructions in use.
  int regs = 0;     ///< Registers in use.
  int inputs = 0;   ///< 1 + highest input index read.
  int result = 0;   ///< Register holding the output.

  /// Each returns the new register. Throw ka::ValueError past kMaxInstrs/kMaxRegs/kMaxInputs.
  int input(int index);
  int scalar(float value);
  int unary(EwOp op, int a);
  int binary(EwOp op, int a, int b);
  void set_result(int reg) { result = reg; }

  /// Evaluates the program for one element with input values `in` (reference semantics, used
  /// by tests and by kernels' tails).
  [[nodiscard]] float eval(const float* in) const noexcept;
  /// "r0=in0 r1=in1 r2=0.5 r3=r1*r2 r4=r0+r3 r5=gelu(r4) -> r5".
  [[nodiscard]] std::string str() const;
};

/// out = program(inputs...) for every element of `out`. Every input has out's ndim and sizes,
/// with stride 0 on broadcast dimensions (see broadcast_view); any strides, including
/// transposed views. `out` must not partially overlap an input (exact aliasing, as in an
/// in-place op, is allowed).
struct ElementwiseArgs {
  TensorView out;
  std::array<TensorView, EwProgram::kMaxInputs> inputs{};
  EwProgram program;
};

/// `view` broadcast to `sizes` (numpy rules: trailing alignment, size-1 dims get stride 0).
/// Throws ka::ValueError naming both shapes when they are not broadcastable.
TensorView broadcast_view(const TensorView& view, const std::int64_t* sizes, int ndim);

/// Prepares the CPU element-wise kernel (validates args; throws ka::ValueError on bad shapes,
/// dtypes or devices; returns not-ok when `config` cannot run). Tunables: `block_elems`
/// (elements per grid block), `threads`, `stream` (streaming stores for a contiguous out).
Status prepare_elementwise_f32_cpu(const ElementwiseArgs& args, const LaunchConfig& config,
                                   CpuLaunch& launch);
/// prepare + run_on_pool.
Status elementwise_f32_cpu(const ElementwiseArgs& args, const LaunchConfig& config);
/// The CUDA version (grid-stride loop; tunables block_threads, items_per_thread). Throws
/// ka::NotImplementedError when CUDA is not compiled in, ka::CudaError on launch failure.
Status elementwise_f32_cuda(const ElementwiseArgs& args, const LaunchConfig& config,
                            void* stream);

/// Descriptors. Shape keys: any op name; tensor args are the inputs, the output size is their
/// broadcast.
const KernelDescriptor& elementwise_f32_cpu_descriptor();
const KernelDescriptor& elementwise_f32_cuda_descriptor();

}  // namespace ka::kernels
