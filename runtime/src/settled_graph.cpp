// Control flow settled by the inputs a graph is lowered with: the specialization passes.
// Compiled without UBSan's vptr check in the sanitizer builds (runtime/CMakeLists.txt): the
// inline torch::jit::Value::setType downcasts to c10::DynamicType, whose typeinfo libtorch
// does not export.
#include "settled_graph.hpp"

#include <ka/core/logging.hpp>

#include <ATen/autocast_mode.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/loop_unrolling.h>
#include <torch/csrc/jit/passes/peephole.h>
#include <torch/csrc/jit/passes/remove_mutation.h>
#include <torch/csrc/jit/passes/symbolic_shape_analysis.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <limits>
#include <optional>
#include <utility>

namespace ka::runtime::detail {
namespace {

// Note [Control flow settled by the inputs]
// lower() binds a graph's inputs, and a model's control flow often depends only on which
// inputs it gets, not on their data: `if mask is not None`, `if use_cache:`, `for _ in
// range(n_layers)`, `is_batched = input.dim() == 3` (PyTorch's RNNs), a size check that
// raises. A graph with blocks is therefore lowered from a copy specialized on its inputs: a
// None, int, float, bool or string input becomes a constant, a tensor input takes its
// complete type (dtype, device, sizes, strides; an Optional one becomes a Tensor), and the
// global modes a model may ask about (grad mode, autocast: nn.MultiheadAttention's fast-path
// checks) are taken as they are while it is lowered, as the interpreter would read them if
// run then. libtorch's symbolic shape propagation carries the sizes through the graph, and
// its peephole, constant propagation and dead code passes (with `a is a` folded to True,
// which they leave: `query is key` in nn.MultiheadAttention) fold each `dim()`, `size()` and
// `if` that this settles, until nothing changes: the branch the interpreter would take on
// these inputs is the one kept. Loops whose trip count is then a constant are unrolled while
// the copies stay within kMaxUnrolledNodes (a loop over 12 layers of a few dozen nodes does;
// a loop of a million steps does not, and stays control flow). Control flow that still
// depends on data (`if x.sum() > 0`) is left, and the graph runs in libtorch's interpreter as
// before. The lowered graph is only for inputs of these sizes and for these modes, as every
// lowered graph is for the inputs bound to it; the copy is kept with the OpGraph
// (OpGraph::source), as its fallbacks were made from its nodes.
constexpr std::int64_t kMaxUnrolledNodes = 20000;

// Nodes in `block` and the blocks within it, each loop's body counted once per iteration
// where its trip count is a constant (an unknown one counts once).
std::int64_t unrolled_size(const torch::jit::Block& block) {
  std::int64_t n = 0;
  for (const torch::jit::Node* node : block.nodes()) {
    std::int64_t inner = 0;
    for (const torch::jit::Block* b : node->blocks()) inner += unrolled_size(*b);
    std::int64_t times = 1;
    if (node->kind() == c10::prim::Loop) {
      if (const auto trips = torch::jit::constant_as<std::int64_t>(node->input(0))) {
        times = std::max<std::int64_t>(*trips, 1);
      }
    }
    const std::int64_t limit = std::numeric_limits<std::int64_t>::max() / 2;
    n += 1 + (inner > 0 && times > limit / inner ? limit : inner * times);
    n = std::min(n, limit);
  }
  return n;
}

// Replaces each node in `block` and the blocks within it for which `value(node)` gives a
// constant by that constant, and removes the node; returns whether any was.
template <typename Value>
bool fold_to_constants(torch::jit::Block& block, const Value& value) {
  bool changed = false;
  std::vector<std::pair<torch::jit::Node*, bool>> folded;
  for (torch::jit::Node* node : block.nodes()) {
    for (torch::jit::Block* b : node->blocks()) changed = fold_to_constants(*b, value) || changed;
    if (node->outputs().size() != 1) continue;
    if (const std::optional<bool> v = value(*node)) folded.emplace_back(node, *v);
  }
  for (const auto& [node, v] : folded) {
    const torch::jit::WithInsertPoint at(node);
    node->output()->replaceAllUsesWith(node->owningGraph()->insertConstant(v));
    node->destroy();
  }
  return changed || !folded.empty();
}

// What a call that reads a global mode (grad mode, autocast) reads now, and `requires_grad`
// of a tensor whose type says it; nullopt for other nodes.
std::optional<bool> global_mode(const torch::jit::Node& node) {
  static const c10::Symbol is_grad_enabled = c10::Symbol::fromQualString("aten::is_grad_enabled");
  if (node.kind() == c10::prim::requires_grad && node.inputs().size() == 1) {
    const auto t = node.input()->type()->cast<c10::TensorType>();
    if (t == nullptr || !t->requiresGrad().has_value()) return std::nullopt;
    return *t->requiresGrad();
  }
  if (!node.inputs().empty()) return std::nullopt;
  if (node.kind() == is_grad_enabled) return c10::GradMode::is_enabled();
  if (node.kind() == c10::aten::is_autocast_enabled) return at::autocast::is_enabled();
  if (node.kind() == c10::aten::is_autocast_cpu_enabled) return at::autocast::is_cpu_enabled();
  return std::nullopt;
}

// True for `a is a`, False for `a is not a` (which libtorch's passes leave); nullopt for
// other nodes.
std::optional<bool> identity_check(const torch::jit::Node& node) {
  const bool is = node.kind() == c10::aten::__is__;
  if ((!is && node.kind() != c10::aten::__isnot__) || node.inputs().size() != 2 ||
      node.input(0) != node.input(1)) {
    return std::nullopt;
  }
  return is;
}

bool has_blocks(const torch::jit::Graph& graph) {
  const auto nodes = graph.nodes();
  return std::any_of(nodes.begin(), nodes.end(),
                     [](const torch::jit::Node* n) { return !n->blocks().empty(); });
}

// Folds what the specialized inputs settle, a round at a time: each round may settle more (an
// unrolled loop's items fold, a folded if exposes a loop).
void fold_until_settled(std::shared_ptr<torch::jit::Graph>& graph) {
  try {
    torch::jit::PropagateShapesOnGraph(graph);
  } catch (const std::exception& e) {
    // Only the sizes are lost: the other passes still settle what the values do.
    log().debug("shape propagation failed ({}); control flow settled without sizes", e.what());
  }
  for (int round = 0; round < 8; ++round) {
    bool changed = torch::jit::PeepholeOptimize(graph);
    changed = fold_to_constants(*graph->block(), global_mode) || changed;
    changed = fold_to_constants(*graph->block(), identity_check) || changed;
    changed = torch::jit::RemoveListMutation(graph) || changed;
    changed = torch::jit::ConstantPropagation(graph) || changed;
    torch::jit::EliminateDeadCode(graph);
    if (has_blocks(*graph) && unrolled_size(*graph->block()) <= kMaxUnrolledNodes) {
      changed = torch::jit::UnrollConstantLoops(graph) || changed;
    }
    if (!changed) break;
  }
}

// A copy of `graph` specialized on `inputs` and folded until settled (Note [Control flow
// settled by the inputs]); nullptr where no input or global mode specializes it.
std::shared_ptr<torch::jit::Graph> specialized_and_settled(torch::jit::Graph& graph,
                                                           const std::vector<c10::IValue>& inputs) {
  std::shared_ptr<torch::jit::Graph> copy = graph.copy();
  bool specialized = false;
  for (std::size_t i = 0; i < inputs.size() && i < copy->inputs().size(); ++i) {
    torch::jit::Value* in = copy->inputs()[i];
    const c10::IValue& v = inputs[i];
    if (v.isNone() || v.isInt() || v.isDouble() || v.isBool() || v.isString()) {
      const torch::jit::WithInsertPoint at(copy->block()->nodes().front());
      in->replaceAllUsesWith(copy->insertConstant(v));
      specialized = true;
    } else if (v.isTensor() && v.toTensor().defined() &&
               c10::TensorType::get()->isSubtypeOf(*in->type())) {
      in->setType(c10::TensorType::create(v.toTensor()));
      specialized = true;
    }
  }
  specialized = fold_to_constants(*copy->block(), global_mode) || specialized;
  if (!specialized) return nullptr;
  fold_until_settled(copy);
  return copy;
}

}  // namespace

std::shared_ptr<torch::jit::Graph> settled_by_inputs(torch::jit::Graph& graph,
                                                     const std::vector<c10::IValue>& inputs) {
  if (!has_blocks(graph)) return nullptr;
  try {
    return specialized_and_settled(graph, inputs);
  } catch (const std::exception& e) {
    // libtorch's passes trust the graph they are given: IR text from a suite file need not
    // hold (a prim::Constant without its value). The graph is then lowered as written, and
    // that lowering's verdict names what is wrong with it.
    log().debug("control flow not settled: copying or folding this graph failed ({})", e.what());
    return nullptr;
  }
}

}  // namespace ka::runtime::detail
