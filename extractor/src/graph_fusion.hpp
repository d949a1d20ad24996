// The FusionChecker's view of a graph: one FusionNode per node of an OpGraph.
#pragma once

#include <ka/extractor/detail/ops.hpp>

#include <ka/extractor/extractor.hpp>
#include <ka/extractor/fusion.hpp>

#include <vector>

namespace ka::extractor::detail {

/// What the FusionChecker is told about a run of a graph's nodes [begin, end), and how they
/// link. Indices in `nodes` and `link_arg` are relative to `begin`.
struct GraphFusionView {
  std::size_t begin = 0;
  std::vector<FusionNode> nodes;  ///< One per node of the run, in graph order.
  /// Per node: the argument that reads the previous node's output where the two can chain
  /// (the previous node's FusionNode is then its chain_input); -1 otherwise.
  std::vector<int> link_arg;
};

/// Whether each value of `graph` is made by one of its nodes; the others are graph inputs and
/// constants, whose data is there before anything runs.
std::vector<bool> made_by_nodes(const OpGraph& graph);

/// Builds the view of nodes [begin, end) of `graph`, each of which runs `specs[i]` (arities
/// already checked): who reads each output (any node of the graph, or its caller), which
/// argument links a node to the one before it, the tensors each node reads from outside a
/// chain, and the bytes of one row of those. The sizes of values the run reads from before
/// it come from graph.values (so those must be set); of values it computes, from
/// output_sizes(), so the row budget is known before any packing. `final_data`: per value,
/// whether it holds its final data while the run is extracted (graph inputs and constants,
/// and what fallbacks that ran during extraction made of them).
GraphFusionView fusion_view(const OpGraph& graph, const std::vector<const OpSpec*>& specs,
                            std::size_t begin, std::size_t end,
                            const std::vector<bool>& final_data);

}  // namespace ka::extractor::detail
