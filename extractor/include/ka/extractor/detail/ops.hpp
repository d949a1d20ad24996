// The operators the extractor serves and how each family's arguments are packed.
// Internal to ka (namespace detail): for the extractor and its unit tests, not a stable API.
#pragma once

#include <ka/core/mem_range.hpp>
#include <ka/extractor/fusion.hpp>
#include <ka/extractor/param_buffer.hpp>
#include <ka/kernels/elementwise.hpp>
#include <ka/kernels/gemm.hpp>
#include <ka/kernels/tensor_view.hpp>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace ka::extractor::detail {

/// An op's kernel family; kAttention is a fusion pattern's only (no op has it). kMaskedFill
/// and kIdentityCast have no kernel of their own (runs_only_fused): masked_fill and where run
/// on ka only as attention's mask, and a dtype or device cast only between attention's
/// softmax and second product, where it casts ka's float32 result to what it is already.
enum class OpKind : std::uint8_t {
  kElementwise, kGemm, kBmm, kSoftmax, kLayerNorm, kSum, kAttention, kMaskedFill, kIdentityCast
};

/// How many operators the extractor serves.
constexpr std::size_t kNumOps = 40;

/// One operator ka serves: its exact signature, family, schema arity, for element-wise ops
/// which arguments are tensors, and for out= overloads which argument is the output.
struct OpSpec {
  int id = 0;
  const char* signature = "";
  OpKind kind = OpKind::kElementwise;
  int num_args = 0;
  bool inplace = false;     ///< self is also the output (add_, relu_).
  bool activation = false;  ///< Can be a GEMM epilogue.
  std::array<std::int8_t, 2> tensor_args{{-1, -1}};
  std::int8_t out_arg = -1;  ///< out= overloads: the argument the result is written into.
};

/// Whether ka runs the op only as part of a fused group (a group of its own is refused).
constexpr bool runs_only_fused(const OpSpec& op) {
  return op.kind == OpKind::kMaskedFill || op.kind == OpKind::kIdentityCast;
}

/// Every op, in a fixed order (OpSpec::id indexes it).
const std::array<OpSpec, kNumOps>& op_specs();
const OpSpec* find_spec(std::string_view signature) noexcept;

/// One node of a group: its op, its schema arguments (pointers into a stack or a value
/// table) and which argument is the previous node's output (-1: none).
struct NodeArgs {
  const OpSpec* spec = nullptr;
  const c10::IValue* const* args = nullptr;
  int num_args = 0;
  int link_arg = -1;
  /// Bit i: argument i already holds its final data while it is packed (an eager call's
  /// arguments; a graph's inputs and constants). See Note [0-dim operands as scalars].
  std::uint32_t fixed_args = 0;
  /// Bit i: argument i is a graph constant every run reads unchanged (OpGraph::run_constants),
  /// so work on its data may be kept across runs (Note [Constant weights packed once]).
  std::uint32_t constant_args = 0;
};

/// fixed_args of a call whose every argument is given.
inline constexpr std::uint32_t kAllArgsFixed = ~std::uint32_t{0};

/// A group to pack: consecutive nodes of one fusion group.
struct GroupArgs {
  FusionKind kind = FusionKind::kNone;
  const NodeArgs* nodes = nullptr;
  int count = 0;
};

/// What packing produced: the kernel's argument struct (in the ParamBuffer), the result the
/// caller sees, the byte ranges touched, and the tensors that make up the shape key.
struct Packed {
  static constexpr int kMaxRanges = 12;
  static constexpr int kMaxKeyViews = 9;
  OpKind family = OpKind::kElementwise;
  const void* args = nullptr;
  at::Tensor result;
  Device device;
  std::array<MemRange, kMaxRanges> ranges{};
  int num_ranges = 0;
  /// The descriptor-facing shape key: op name the kernel's heuristic understands
  /// ("aten::addmm" for linear too) and its tensors.
  const char* key_op = "";
  std::array<kernels::TensorView, kMaxKeyViews> key_views{};
  int num_key_views = 0;
  /// The fusion pattern for table lookups ("fused::gemm_epilogue"), or the signature.
  const char* lookup_op = "";
  bool strided = false;  ///< Some input is non-contiguous (a strided kernel variant runs).
  /// Tensors the packer made (a reshape that had to copy) that the kernel reads.
  std::array<at::Tensor, 2> temporaries;
  /// A GEMM whose mat2 is a graph constant's data (NodeArgs::constant_args), which may be
  /// packed once (Note [Constant weights packed once]); `slot` null for any other group.
  struct ConstantMat2 {
    at::Tensor owner;                     ///< the graph constant
    kernels::TensorView view;             ///< mat2 as the kernel reads it (owner, or owner.t())
    kernels::PackedMat2* slot = nullptr;  ///< where the kernel's args take a packed mat2
  } constant_mat2;
};

/// Validates the group's arguments and packs them; allocates the outputs. Throws
/// ka::ValueError / ka::NotImplementedError with a message naming the argument at fault.
void pack_group(const GroupArgs& group, ParamBuffer& buffer, Packed& out);

/// The device the group runs on: the device of its first tensor argument (the scheduling
/// policy "inputs' device"). Throws ka::ValueError when no argument is a tensor.
Device group_device(const GroupArgs& group);

/// A tensor's sizes, as shape propagation sees them.
using Sizes = std::vector<std::int64_t>;

/// The sizes of `spec`'s result, without running it: `args` are its schema arguments and
/// `tensor_sizes[i]` the sizes of argument i where it is a tensor (null where it is not, or
/// where its sizes are unknown). nullopt when a size it needs is unknown or the arguments do
/// not check (packing says why).
std::optional<Sizes> output_sizes(const OpSpec& spec, const c10::IValue* const* args,
                                  const Sizes* const* tensor_sizes);

/// The MemRange `t` spans (from its lowest to its highest addressed element).
MemRange range_of(const at::Tensor& t, Access access);

}  // namespace ka::extractor::detail
