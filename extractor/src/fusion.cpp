#include "graph_fusion.hpp"

#include <ka/extractor/fusion.hpp>

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>

namespace ka::extractor {

const char* to_string(FusionKind kind) noexcept {
  switch (kind) {
    case FusionKind::kNone:
      return "none";
    case FusionKind::kElementwiseChain:
      return "ew_chain";
    case FusionKind::kGemmEpilogue:
      return "gemm_epilogue";
    case FusionKind::kPointwiseReduction:
      return "pointwise_reduction";
    case FusionKind::kAttention:
      return "attention";
  }
  return "?";
}

FusionChecker::Budget FusionChecker::budget(DeviceType device) const {
  return device == DeviceType::kCUDA ? cuda_ : cpu_;
}

void FusionChecker::set_budget(DeviceType device, Budget b) {
  (device == DeviceType::kCUDA ? cuda_ : cpu_) = b;
}

namespace {
// True when node j reads node j-1's output and nothing else reads it.
bool chained(const std::vector<FusionNode>& nodes, std::size_t j) {
  return j > 0 && nodes[j].chain_input == static_cast<int>(j - 1) && nodes[j - 1].uses == 1;
}

// Note [Attention pattern]
// bmm|matmul(q, kᵀ) -> [mul|div.Scalar, or mul|div.Tensor by a 0-dim constant (Note [Scale
// by a 0-dim tensor])] -> [add.Tensor, or masked_fill or where (the mask)] -> softmax ->
// [to|type_as (Note [Identity casts])] -> bmm|matmul(·, v),
// each node feeding only the next (the probabilities as the second product's first operand),
// is one attention kernel: the scores never materialise beyond a tile. The rule only sees the
// pattern; the packer refuses what the kernel cannot run (softmax over another dim, broadcast
// batch dimensions; Note [Packing attention]) and the nodes then run one by one. CPU only:
// ka has no CUDA attention kernel.
// The attention group's node count when one starts at i, else 0.
int attention_at(const std::vector<FusionNode>& nodes, std::size_t i) {
  if (!nodes[i].batched_gemm) return 0;
  std::size_t j = i + 1;
  const auto next_is = [&](bool FusionNode::*kind) {
    return j < nodes.size() && nodes[j].*kind && chained(nodes, j);
  };
  if (next_is(&FusionNode::scalar_scale)) ++j;
  if (next_is(&FusionNode::tensor_add) || next_is(&FusionNode::masked_fill)) ++j;
  if (!next_is(&FusionNode::softmax)) return 0;
  ++j;
  if (next_is(&FusionNode::identity_cast)) ++j;
  if (!next_is(&FusionNode::batched_gemm)) return 0;
  return static_cast<int>(j - i + 1);
}
}  // namespace

std::vector<FusionGroup> FusionChecker::plan(const std::vector<FusionNode>& nodes,
                                             DeviceType device) const {
  const Budget b = budget(device);
  std::vector<FusionGroup> groups;
  std::size_t i = 0;
  while (i < nodes.size()) {
    const FusionNode& n = nodes[i];
    FusionGroup g;
    g.first = static_cast<int>(i);
    const int attention = device == DeviceType::kCPU ? attention_at(nodes, i) : 0;
    if (attention > 0) {
      g.kind = FusionKind::kAttention;
      g.count = attention;
      g.reason = "attention: " + std::to_string(attention) +
                 " ops in one kernel, an online softmax over blocks of keys (the scores never "
                 "materialise)";
    } else if (n.gemm && i + 1 < nodes.size() && nodes[i + 1].activation && chained(nodes, i + 1)) {
      g.kind = FusionKind::kGemmEpilogue;
      g.count = 2;
      g.reason = n.signature + " feeds only " + nodes[i + 1].signature +
                 ": activation applied to each output tile";
    } else if (n.elementwise) {
      // The first node's link, if any, comes from outside the group: one more input.
      const bool linked_in = n.chain_input >= 0;
      std::size_t j = i;
      int inputs = n.external_inputs + (linked_in ? 1 : 0);
      std::int64_t row_bytes = n.row_bytes + (linked_in ? n.link_row_bytes : 0);
      while (j + 1 < nodes.size() && nodes[j + 1].elementwise && chained(nodes, j + 1) &&
             static_cast<int>(j + 1 - i) < b.max_chain_ops &&
             inputs + nodes[j + 1].external_inputs <= b.max_inputs) {
        ++j;
        inputs += nodes[j].external_inputs;
        row_bytes += nodes[j].row_bytes;
      }
      const std::size_t r = j + 1;
      const bool feeds_reduction = r < nodes.size() && nodes[r].row_reduction && chained(nodes, r);
      if (feeds_reduction) row_bytes += nodes[r].row_bytes;
      if (feeds_reduction && row_bytes <= b.row_working_set_bytes) {
        g.kind = FusionKind::kPointwiseReduction;
        g.count = static_cast<int>(r - i + 1);
        g.reason = std::to_string(r - i) + " element-wise op(s) evaluated as the prologue of " +
                   nodes[r].signature + " (row working set " + std::to_string(row_bytes) +
                   " B within " + std::to_string(b.row_working_set_bytes) + " B)";
      } else if (j > i) {
        g.kind = FusionKind::kElementwiseChain;
        g.count = static_cast<int>(j - i + 1);
        g.reason = std::to_string(j - i + 1) + " element-wise ops, each feeding only the next: one pass";
      }
      if (feeds_reduction && row_bytes > b.row_working_set_bytes) {
        g.reason += std::string(g.reason.empty() ? "" : "; ") + "not fused into " +
                    nodes[r].signature + ": row working set " + std::to_string(row_bytes) +
                    " B exceeds the budget of " + std::to_string(b.row_working_set_bytes) + " B";
      }
    }
    groups.push_back(g);
    i += static_cast<std::size_t>(g.count);
  }
  return groups;
}

namespace detail {
namespace {

// Readers of every value: the nodes that take it as an argument, and the caller for outputs.
std::vector<int> count_readers(const OpGraph& graph) {
  std::vector<int> readers(graph.values.size(), 0);
  for (const auto& node : graph.nodes) {
    for (int v : node.inputs) ++readers[static_cast<std::size_t>(v)];
  }
  for (int v : graph.outputs) ++readers[static_cast<std::size_t>(v)];
  return readers;
}

// Note [Scale by a 0-dim tensor]
// A traced model scales by a Python number as by a 0-dim tensor constant: `scores /
// math.sqrt(d)` becomes aten::div.Tensor(scores, prim::Constant[value={8.}]), a float64 one.
// With a float32 operand that is what the Scalar overload computes (ATen takes a CPU 0-dim
// operand as a scalar, and the float operand sets the result type), so such a node is
// attention's scale, as mul.Scalar and div.Scalar are, when the 0-dim tensor holds its final
// data while extracting (div: as the divisor), for the packer reads its value then: a graph
// input or constant, or what fallbacks that ran during extraction made of them (GPT-2's
// traced `torch.full([], v.size(-1) ** 0.5)`; Note [Final data while extracting]). A 0-dim
// tensor a task makes is a runtime value: no scale.
bool scales_by_constant(std::string_view signature, const OpGraph::Node& node, int link_arg,
                        const std::vector<std::optional<Sizes>>& sizes,
                        const std::vector<bool>& final_data) {
  const bool mul = signature == "aten::mul.Tensor";
  if (!(mul || signature == "aten::div.Tensor") || node.inputs.size() != 2) return false;
  if (link_arg != 0 && !(mul && link_arg == 1)) return false;
  const auto other = static_cast<std::size_t>(node.inputs[link_arg == 0 ? 1 : 0]);
  return sizes[other] && sizes[other]->empty() && final_data[other];
}

// The sizes of every tensor value: the tensors graph.values holds as given, the output of
// each node of [begin, end) as output_sizes() infers it (nullopt where it cannot).
std::vector<std::optional<Sizes>> value_sizes(const OpGraph& graph,
                                              const std::vector<const OpSpec*>& specs,
                                              std::size_t begin, std::size_t end) {
  std::vector<std::optional<Sizes>> sizes(graph.values.size());
  for (std::size_t v = 0; v < graph.values.size(); ++v) {
    const c10::IValue& value = graph.values[v];
    if (value.isTensor() && value.toTensor().defined()) {
      const auto s = value.toTensor().sizes();
      sizes[v] = Sizes(s.begin(), s.end());
    }
  }
  std::vector<const c10::IValue*> args;
  std::vector<const Sizes*> arg_sizes;
  for (std::size_t i = begin; i < end; ++i) {
    args.clear();
    arg_sizes.clear();
    for (int v : graph.nodes[i].inputs) {
      const auto& s = sizes[static_cast<std::size_t>(v)];
      args.push_back(&graph.values[static_cast<std::size_t>(v)]);
      arg_sizes.push_back(s ? &*s : nullptr);
    }
    sizes[static_cast<std::size_t>(graph.nodes[i].outputs[0])] =
        output_sizes(*specs[i], args.data(), arg_sizes.data());
  }
  return sizes;
}

// Bytes of one row (the last dimension; a 0-d tensor is one element) of a value ka's f32
// kernels read; 0 when its sizes are unknown (packing then rejects the node anyway).
std::int64_t row_bytes_of(const std::optional<Sizes>& sizes) {
  if (!sizes) return 0;
  return (sizes->empty() ? 1 : sizes->back()) * static_cast<std::int64_t>(sizeof(float));
}

}  // namespace

std::vector<bool> made_by_nodes(const OpGraph& graph) {
  std::vector<bool> made(graph.values.size(), false);
  for (const auto& node : graph.nodes) {
    for (int v : node.outputs) made[static_cast<std::size_t>(v)] = true;
  }
  return made;
}

GraphFusionView fusion_view(const OpGraph& graph, const std::vector<const OpSpec*>& specs,
                            std::size_t begin, std::size_t end,
                            const std::vector<bool>& final_data) {
  const std::size_t n = end - begin;
  const std::vector<int> readers = count_readers(graph);
  const std::vector<std::optional<Sizes>> sizes = value_sizes(graph, specs, begin, end);
  GraphFusionView view{begin, std::vector<FusionNode>(n), std::vector<int>(n, -1)};
  for (std::size_t r = 0; r < n; ++r) {
    const std::size_t i = begin + r;
    const OpSpec& s = *specs[i];
    const OpGraph::Node& node = graph.nodes[i];
    FusionNode& f = view.nodes[r];
    int& link_arg = view.link_arg[r];
    f.signature = s.signature;
    f.elementwise = s.kind == OpKind::kElementwise && !s.inplace;
    f.gemm = s.kind == OpKind::kGemm && s.out_arg < 0;  // an out= result is the caller's
    f.activation = s.activation;
    f.row_reduction = s.kind == OpKind::kSoftmax || s.kind == OpKind::kLayerNorm;
    f.softmax = s.kind == OpKind::kSoftmax;
    f.batched_gemm = s.kind == OpKind::kBmm;
    f.tensor_add = std::string_view(s.signature) == "aten::add.Tensor";
    f.masked_fill = s.kind == OpKind::kMaskedFill;
    f.identity_cast = s.kind == OpKind::kIdentityCast;
    f.uses = readers[static_cast<std::size_t>(node.outputs[0])];
    if (r > 0) {
      const int prev = graph.nodes[i - 1].outputs[0];
      int hits = 0;
      for (std::size_t a = 0; a < node.inputs.size(); ++a) {
        if (node.inputs[a] == prev) {
          ++hits;
          link_arg = static_cast<int>(a);
        }
      }
      // The chain link must be the op's first (tensor) argument for reductions and
      // activations; element-wise ops accept it anywhere, and so does a fill (where's scores
      // are its second or third argument; the packer checks which); read twice means no chain.
      const bool link_ok = hits == 1 && (f.elementwise || f.masked_fill || link_arg == 0);
      if (link_ok) {
        f.chain_input = static_cast<int>(r - 1);
        f.link_row_bytes = row_bytes_of(sizes[static_cast<std::size_t>(prev)]);
      } else {
        link_arg = -1;
      }
    }
    f.scalar_scale = std::string_view(s.signature) == "aten::mul.Scalar" ||
                     std::string_view(s.signature) == "aten::div.Scalar" ||
                     scales_by_constant(s.signature, node, link_arg, sizes, final_data);
    for (std::size_t a = 0; a < node.inputs.size(); ++a) {
      const auto v = static_cast<std::size_t>(node.inputs[a]);
      if (static_cast<int>(a) == link_arg || !sizes[v]) continue;
      ++f.external_inputs;
      f.row_bytes += row_bytes_of(sizes[v]);
    }
  }
  return view;
}

}  // namespace detail

}  // namespace ka::extractor
