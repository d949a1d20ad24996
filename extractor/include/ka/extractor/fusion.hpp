// FusionChecker: which neighbouring operator calls of a graph run as one kernel.
#pragma once

#include <ka/core/device.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace ka::extractor {

/// The fusion patterns ka has kernels for.
enum class FusionKind : std::uint8_t {
  kNone,                ///< A single op.
  kElementwiseChain,    ///< Element-wise ops, each feeding only the next: one pass.
  kGemmEpilogue,        ///< mm/addmm/linear followed by one activation, applied per tile.
  kPointwiseReduction,  ///< An element-wise chain feeding softmax or layer_norm (prologue).
  /// bmm|matmul -> [scale] -> [mask add] -> softmax -> bmm|matmul: one online-softmax kernel
  /// (CPU only).
  kAttention,
};
/// "none", "ew_chain", "gemm_epilogue", "pointwise_reduction", "attention".
const char* to_string(FusionKind kind) noexcept;

/// What the checker sees of a graph node.
struct FusionNode {
  std::string signature;
  bool elementwise = false;  ///< One of the element-wise ops ka can chain.
  bool gemm = false;         ///< mm / addmm / linear.
  bool activation = false;   ///< relu / gelu / sigmoid / silu (a GEMM epilogue).
  bool row_reduction = false;  ///< softmax / layer_norm (takes a prologue).
  bool softmax = false;        ///< _softmax / softmax.int (attention's middle).
  bool batched_gemm = false;   ///< bmm / matmul (attention's two products).
  /// mul.Scalar / div.Scalar, or mul.Tensor / div.Tensor by a 0-dim tensor whose value is
  /// known while extracting (attention's scale; Note [Scale by a 0-dim tensor]).
  bool scalar_scale = false;
  bool tensor_add = false;     ///< add.Tensor (attention's mask).
  bool masked_fill = false;    ///< masked_fill or where (attention's boolean mask).
  /// to(dtype|device|other), type_as: attention's probabilities may pass through one.
  bool identity_cast = false;
  int chain_input = -1;  ///< Index of the previous node whose output this node reads (-1: none).
  int uses = 0;          ///< Readers of this node's output (graph outputs count as readers).
  int external_inputs = 0;  ///< Tensor inputs other than the chain link.
  /// Bytes of one row (the last dimension) of the tensors this node reads other than the
  /// chain link: what it adds to a fused row reduction's working set.
  std::int64_t row_bytes = 0;
  /// Bytes of one row of the chain link (the previous node's output): part of the working
  /// set when this node starts a group, since the link then comes from outside it.
  std::int64_t link_row_bytes = 0;
};

/// One group: consecutive nodes [first, first + count) and its kind, with the reason.
struct FusionGroup {
  FusionKind kind = FusionKind::kNone;
  int first = 0;
  int count = 1;
  std::string reason;
};

/// Rule-based fusion (DESIGN.md §5) with a per-device budget: attention on the CPU
/// (Note [Attention pattern]); at most
/// EwProgram::kMaxInstrs instructions and kMaxInputs inputs per chain, and for a prologue
/// feeding a row reduction a row working set within L2 (CPU) or shared memory (CUDA).
/// A measured decision from the recommendation table overrides the rules (see
/// Extractor::run_graph).
class FusionChecker {
 public:
  struct Budget {
    int max_chain_ops = 16;
    int max_inputs = 8;
    std::int64_t row_working_set_bytes = 512 * 1024;  ///< CPU: L2 per core; CUDA: 48 KiB smem.
  };

  [[nodiscard]] Budget budget(DeviceType device) const;
  void set_budget(DeviceType device, Budget b);

  /// Groups `nodes` (in graph order) into kernels; every node is in exactly one group.
  [[nodiscard]] std::vector<FusionGroup> plan(const std::vector<FusionNode>& nodes,
                                              DeviceType device) const;

 private:
  Budget cpu_{};
  Budget cuda_{16, 8, 48 * 1024};
};

}  // namespace ka::extractor
