// A TorchScript graph specialized on the inputs it is lowered with, so that control flow
// those inputs settle is folded away (Note [Control flow settled by the inputs]).
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/ir/ir.h>

#include <memory>
#include <vector>

namespace ka::runtime::detail {

/// `graph` specialized on `inputs` (Note [Control flow settled by the inputs] in
/// settled_graph.cpp): a new graph, or null where `graph` has no control flow or no input
/// that could settle any.
std::shared_ptr<torch::jit::Graph> settled_by_inputs(torch::jit::Graph& graph,
                                                     const std::vector<c10::IValue>& inputs);

}  // namespace ka::runtime::detail
