// Counting a TorchScript graph's nodes without recursion (suite limits, reference stacks).
#pragma once

#include <cstddef>

namespace torch::jit {
struct Graph;
}  // namespace torch::jit

namespace ka::harness::detail {

/// Nodes of `graph`, those of nested blocks included, counted with an explicit stack.
std::size_t count_graph_nodes(const torch::jit::Graph& graph);

}  // namespace ka::harness::detail
