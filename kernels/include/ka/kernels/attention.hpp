// Fused scaled-dot-product attention on the CPU: softmax(scale * q @ kᵀ + mask) @ v in one
// kernel that never materialises the scores (online softmax over blocks of keys).
#pragma once

#include <ka/core/launch_config.hpp>
#include <ka/core/shape_key.hpp>
#include <ka/core/status.hpp>
#include <ka/kernels/cpu_launch.hpp>
#include <ka/kernels/kernel_descriptor.hpp>
#include <ka/kernels/tensor_view.hpp>

#include <cstdint>

namespace ka::kernels {

/// out = softmax(scores, dim=-1) @ value with scores = scale * query @ key_t + mask, then
/// fill_value where fill_mask is true (masked_fill), or where it is false when
/// fill_where_false (torch.where(fill_mask, scores, fill_value)), with the batch dimensions
/// in front (one or more, the same sizes in every operand):
///   query [..., Sq, D], key_t [..., D, Sk] (kᵀ, as attention's first matmul reads it),
///   value [..., Sk, Dv], mask [..., Sq, Sk] (float) and fill_mask [..., Sq, Sk] (bool), each
///   optional (undefined: data == nullptr, ndim == 0), out [..., Sq, Dv] with unit stride
///   along Dv.
/// Any strides otherwise; a broadcast mask has stride 0 where it broadcasts. float32 only.
/// A row whose every score is -inf gives NaN, as softmax does.
struct AttentionArgs {
  TensorView out;
  TensorView query;
  TensorView key_t;
  TensorView value;
  TensorView mask;
  float scale = 1.0F;
  TensorView fill_mask;
  float fill_value = 0.0F;
  bool fill_where_false = false;
};

/// The sizes the kernel's descriptor reads from a shape key fused::attention(query, key_t,
/// value[, mask]).
struct AttentionShape {
  std::int64_t batch = 1;  ///< Product of the batch dimensions.
  std::int64_t sq = 0;
  std::int64_t sk = 0;
  std::int64_t d = 0;
  std::int64_t dv = 0;
  bool mask = false;  ///< A mask of either kind (the key's fourth tensor).
};
/// Throws ka::ValueError when the key is not a well-formed attention.
AttentionShape attention_shape(const ShapeKey& key);

/// The grid is (batch entries) x (spans of blocks of block_q queries); each query block walks
/// the keys in blocks of block_k. Throws ka::ValueError on inconsistent operands (naming
/// them); a not-ok Status when `config` cannot run on this CPU.
Status prepare_attention_f32_cpu(const AttentionArgs& args, const LaunchConfig& config,
                                 CpuLaunch& launch);
Status attention_f32_cpu(const AttentionArgs& args, const LaunchConfig& config);

/// The kernel's descriptor: tunables block_q (queries per block, a multiple of the GEMM's
/// micro-tile rows), block_k (keys per online-softmax step), micro_n (the GEMM micro-kernel's
/// width; 0: the ISA's default) and threads.
const KernelDescriptor& attention_f32_cpu_descriptor();

}  // namespace ka::kernels
