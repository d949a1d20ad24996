// The FusionChecker's view of a graph: one FusionNode per node of an OpGraph.
#pragma once

#include <ka/extractor/detail/ops.hpp>

#include <ka/extractor/extractor.hpp>
#include <ka/extractor/fusion.hpp>

#include <vector>

namespace ka::extractor::detail {

/// What the FusionChecker is told about a graph, and how its nodes link.
struct GraphFusionView {
  std::vector<FusionNode> nodes;  ///< One per graph node, in graph order.
  /// Per node: the argument that reads the previous node's output where the two can chain
  /// (the previous node's FusionNode is then its chain_input); -1 otherwise.
  std::vector<int> link_arg;
};

/// Builds the view of `graph`, whose node i runs `specs[i]` (arities already checked): who
/// reads each output, which argument links a node to the one before it, the tensors each
/// node reads from outside a chain, and the bytes of one row of those (sizes of values the
/// graph computes come from output_sizes(), so the row budget is known before any packing).
GraphFusionView fusion_view(const OpGraph& graph, const std::vector<const OpSpec*>& specs);

}  // namespace ka::extractor::detail
