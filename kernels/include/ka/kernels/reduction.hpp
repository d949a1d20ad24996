// Row-wise and reduction kernels: softmax (online), layer_norm (Welford), sum over dims. The
// softmax and layer_norm take an element-wise prologue, which is how pointwise → reduction
// fusion (scale + mask → softmax, residual add → layer_norm) runs in one pass.
#pragma once

#include <ka/core/launch_config.hpp>
#include <ka/core/shape_key.hpp>
#include <ka/core/status.hpp>
#include <ka/kernels/cpu_launch.hpp>
#include <ka/kernels/elementwise.hpp>
#include <ka/kernels/kernel_descriptor.hpp>
#include <ka/kernels/tensor_view.hpp>

#include <array>
#include <cstdint>

namespace ka::kernels {

/// out = softmax(x, dim) with x = prologue(inputs...) evaluated per element (inputs broadcast
/// to out's sizes by stride 0, as in ElementwiseArgs). An unfused softmax has the prologue
/// "r0=in0 -> r0". `dim` is in [0, out.ndim); any strides.
struct SoftmaxArgs {
  TensorView out;
  std::array<TensorView, EwProgram::kMaxInputs> inputs{};
  EwProgram prologue;
  int dim = 0;
};

/// out = (x − mean) / sqrt(var + eps) · weight + bias over the last `normalized_dims`
/// dimensions, x = prologue(inputs...) as in SoftmaxArgs (biased variance, as ATen).
/// weight and bias are optional (data == nullptr) and, when present, have the normalized shape.
struct LayerNormArgs {
  TensorView out;
  std::array<TensorView, EwProgram::kMaxInputs> inputs{};
  EwProgram prologue;
  int normalized_dims = 1;
  TensorView weight;
  TensorView bias;
  float eps = 1e-5F;
};

/// out = sum of `in` over the dimensions whose bit is set in `reduce_mask`. `out` has in's ndim
/// with size 1 on reduced dimensions (keepdim layout: a caller without keepdim passes a view).
struct SumArgs {
  TensorView out;
  TensorView in;
  std::uint64_t reduce_mask = 0;
};

/// CPU versions (tunables: `rows_per_block`, `threads`; softmax and layer_norm also `stream`
/// and `prefetch`). Throw ka::ValueError on bad args.
Status prepare_softmax_f32_cpu(const SoftmaxArgs& args, const LaunchConfig& config,
                               CpuLaunch& launch);
Status prepare_layer_norm_f32_cpu(const LayerNormArgs& args, const LaunchConfig& config,
                                  CpuLaunch& launch);
Status prepare_sum_f32_cpu(const SumArgs& args, const LaunchConfig& config, CpuLaunch& launch);
Status softmax_f32_cpu(const SoftmaxArgs& args, const LaunchConfig& config);
Status layer_norm_f32_cpu(const LayerNormArgs& args, const LaunchConfig& config);
Status sum_f32_cpu(const SumArgs& args, const LaunchConfig& config);

/// CUDA versions (a block or a warp per row; tunables `block_threads`, `rows_per_block`).
Status softmax_f32_cuda(const SoftmaxArgs& args, const LaunchConfig& config, void* stream);
Status layer_norm_f32_cuda(const LayerNormArgs& args, const LaunchConfig& config, void* stream);
Status sum_f32_cuda(const SumArgs& args, const LaunchConfig& config, void* stream);

/// Descriptors (shape keys: the op's tensor arguments; the reduced/normalized extent is read
/// from the key's first tensor and the op's dim argument is not part of the key, so the
/// heuristics assume the last dimension).
const KernelDescriptor& softmax_f32_cpu_descriptor();
const KernelDescriptor& layer_norm_f32_cpu_descriptor();
const KernelDescriptor& sum_f32_cpu_descriptor();
const KernelDescriptor& softmax_f32_cuda_descriptor();
const KernelDescriptor& layer_norm_f32_cuda_descriptor();
const KernelDescriptor& sum_f32_cuda_descriptor();

}  // namespace ka::kernels
