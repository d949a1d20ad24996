// fp32 GEMM with aten::mm / aten::addmm semantics, on CPU and CUDA.
#pragma once

#include <ka/core/launch_config.hpp>
#include <ka/core/shape_key.hpp>
#include <ka/core/status.hpp>
#include <ka/kernels/cpu_launch.hpp>
#include <ka/kernels/kernel_descriptor.hpp>
#include <ka/kernels/tensor_view.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ka::kernels {

/// An activation applied to each output element after bias (the GEMM + epilogue fusion), with
/// the element-wise kernels' semantics (see EwOp).
enum class Epilogue : std::uint8_t { kNone, kRelu, kGelu, kGeluTanh, kSigmoid, kSilu };

/// "none", "relu", "gelu", "gelu_tanh", "sigmoid", "silu".
const char* to_string(Epilogue e) noexcept;

/// out = beta * self + alpha * (mat1 @ mat2), as aten::addmm; aten::mm when `self` is
/// undefined (data == nullptr and ndim == 0). `self` broadcasts to [M, N] from 0-D, [N],
/// [1, N], [M, 1] or [M, N]. When beta == 0, `self` is ignored (NaN/Inf in it do not
/// propagate), as in PyTorch. Inputs may have any strides (transposed views included);
/// `out` must be [M, N] and must not overlap the inputs.
/// How the tiled CPU GEMM packs mat2 under one configuration (Note [CPU GEMM blocking]): K
/// blocks of tile_k rows, each ceil(n / cols) slivers `cols` wide (kb x cols floats, zero-padded
/// past n), written by the micro-kernel family's packing routine `pack`. Equal layouts of one
/// matrix hold equal floats.
struct PackedMat2Layout {
  std::int64_t k = 0;
  std::int64_t n = 0;
  std::int64_t tile_k = 0;
  std::int64_t cols = 0;
  const void* pack = nullptr;  ///< identifies the packing routine (an ISA's)

  /// Floats the packed matrix takes: k x ceil(n / cols) x cols.
  [[nodiscard]] std::int64_t floats() const noexcept;
  friend bool operator==(const PackedMat2Layout& a, const PackedMat2Layout& b) noexcept {
    return a.k == b.k && a.n == b.n && a.tile_k == b.tile_k && a.cols == b.cols &&
           a.pack == b.pack;
  }
};

/// mat2 packed before the run (pack_gemm_mat2): a constant weight is packed once, not on every
/// call (Note [Constant weights packed once]). `data` null: none.
struct PackedMat2 {
  const float* data = nullptr;
  PackedMat2Layout layout;
};

struct AddmmArgs {
  TensorView out;
  TensorView self;
  TensorView mat1;
  TensorView mat2;
  float beta = 1.0F;
  float alpha = 1.0F;
  Epilogue epilogue = Epilogue::kNone;  ///< out = act(beta * self + alpha * mat1 @ mat2)
  /// mat2 already packed; the CPU GEMM reads it instead of packing mat2 when `config` packs in
  /// exactly its layout, and ignores it otherwise. The caller keeps it equal to mat2's data.
  PackedMat2 mat2_packed;
};

/// out[b] = mat1[b] @ mat2[b], as aten::bmm: mat1 [B, M, K], mat2 [B, K, N], out [B, M, N];
/// any strides.
struct BmmArgs {
  TensorView out;
  TensorView mat1;
  TensorView mat2;
};

/// M, N, K of a GEMM, as derived from a shape key of aten::mm/addmm.
struct GemmShape {
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
};

/// Reads M, N, K from a shape key of aten::mm (mat1, mat2) or aten::addmm (self, mat1, mat2).
/// Throws ka::ValueError when the key is not a well-formed GEMM.
GemmShape gemm_shape(const ShapeKey& key);

/// Shape key of an addmm with an [N] bias (the common linear-layer case) or of an mm.
ShapeKey addmm_shape_key(std::int64_t m, std::int64_t k, std::int64_t n, bool with_bias = true);

/// Runs the blocked CPU GEMM. Throws ka::ValueError on inconsistent shapes, dtypes or
/// devices (naming them); returns a not-ok Status when `config` cannot run this shape.
Status gemm_f32_cpu(const AddmmArgs& args, const LaunchConfig& config);
/// The layout the CPU GEMM packs `args.mat2` in under `config`, or nullopt where that config
/// packs no mat2 (the skinny paths stream it; an empty matrix) or cannot run the shape.
std::optional<PackedMat2Layout> gemm_f32_cpu_mat2_layout(const AddmmArgs& args,
                                                         const LaunchConfig& config);
/// Packs `args.mat2` whole in `layout` (from gemm_f32_cpu_mat2_layout) into `out`, which holds
/// layout.floats() floats.
void pack_gemm_f32_cpu_mat2(const AddmmArgs& args, const PackedMat2Layout& layout, float* out);
/// The same as a grid of blocks for ka's executor (see CpuLaunch); `args` must outlive it.
Status prepare_gemm_f32_cpu(const AddmmArgs& args, const LaunchConfig& config,
                            CpuLaunch& launch);
/// Batched GEMM on CPU: the grid is batch x output tiles; config as the GEMM's (the shape key
/// of a bmm is aten::bmm(mat1, mat2); the descriptor's heuristic sees one batch entry).
Status prepare_bmm_f32_cpu(const BmmArgs& args, const LaunchConfig& config, CpuLaunch& launch);
Status bmm_f32_cpu(const BmmArgs& args, const LaunchConfig& config);
/// Batched GEMM on CUDA (the tiled SGEMM with blockIdx.z over the batch).
Status bmm_f32_cuda(const BmmArgs& args, const LaunchConfig& config, void* stream);
/// Descriptors of the batched GEMMs (the 2-D ones' tunables, `skinny` fixed at 0 on the CPU;
/// keys aten::bmm(...)).
const KernelDescriptor& bmm_f32_cpu_descriptor();
const KernelDescriptor& bmm_f32_cuda_descriptor();

/// The CPU micro-kernel family in use: "avx512", "avx2" or "generic". Chosen from the CPU's
/// features; KA_CPU_ISA=avx512|avx2|generic (or force_cpu_isa) selects a path explicitly.
std::string gemm_cpu_isa();
/// The micro-tile widths (the tunable micro_n's nonzero values) the active family has:
/// AVX-512 {16, 32, 48}, AVX2 and generic {16}. Tests derive their expectations from it.
std::vector<std::int64_t> gemm_cpu_micro_widths();
/// Forces a micro-kernel family for this process (tests use it to cover every path). Throws
/// ka::ValueError for an unknown name or one the CPU cannot run. "" restores automatic choice.
void force_cpu_isa(const std::string& isa);

/// The packing budget of the CPU GEMM's space: this CPU's L2 bytes per core (1 MiB if unknown).
std::int64_t l2_budget_bytes();

/// The CPU GEMM's descriptor: tunables tile_m, tile_n, tile_k, threads, skinny, split_k,
/// micro_n, block_m.
const KernelDescriptor& gemm_f32_cpu_descriptor();

/// True when this build compiled the CUDA kernels.
bool cuda_compiled() noexcept;

/// Runs the tiled CUDA SGEMM on device pointers in `args` (stream: a cudaStream_t, or null
/// for the default stream). Throws ka::CudaError on launch failure, ka::NotImplementedError
/// when CUDA is not compiled in.
Status gemm_f32_cuda(const AddmmArgs& args, const LaunchConfig& config, void* stream);

/// The CUDA SGEMM's descriptor: tunables tile_m, tile_n, tile_k, thread_m, thread_n, vec.
const KernelDescriptor& gemm_f32_cuda_descriptor();

/// aten::mm on bfloat16 CUDA tensors with tensor cores (WMMA; float accumulation, out rounded
/// to bf16): out = act(alpha * mat1 @ mat2); `self` must be absent (or beta 0). Throws
/// ka::ValueError on bad arguments, ka::CudaError on launch failure, ka::NotImplementedError
/// when CUDA is not compiled in.
Status gemm_bf16_cuda(const AddmmArgs& args, const LaunchConfig& config, void* stream);

/// The bf16 GEMM's descriptor: tunables tile_m, tile_n, warps_m, warps_n.
const KernelDescriptor& gemm_bf16_cuda_descriptor();

/// The shape key of aten::mm(mat1 [m, k], mat2 [k, n]) on bfloat16.
ShapeKey mm_bf16_shape_key(std::int64_t m, std::int64_t k, std::int64_t n);

}  // namespace ka::kernels
