// Runtime: eager calls through ka's dispatcher; TorchScript graphs lowered to OpGraph.
#include "settled_graph.hpp"

#include <ka/core/error.hpp>
#include <ka/core/fingerprint.hpp>
#include <ka/core/logging.hpp>
#include <ka/dispatch/dispatcher.hpp>
#include <ka/kernels/cuda_limits.hpp>
#include <ka/runtime/aten_ops.hpp>
#include <ka/runtime/runtime.hpp>

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace ka::runtime {
const char* to_string(SchedulePolicy /*p*/) noexcept { return "inputs-device"; }

Runtime::Runtime() {
  register_aten_ops();
  // Production builds point KA_TUNED_TABLE at a shipped table: loaded once per process.
  static const bool loaded = load_table_from_environment();
  (void)loaded;
}

bool Runtime::load_table_from_environment() const {
  const char* path = std::getenv("KA_TUNED_TABLE");
  if (path == nullptr || *path == '\0') return false;
  load_table(path);
  log().info("KA_TUNED_TABLE={}: {} tuned configurations for this device", path,
             extractor().table()->size());
  return true;
}

void Runtime::load_table(const std::string& path) const {
  const db::KernelVersions versions = extractor().kernel_versions();
  const std::string cpu = cpu_fingerprint().key();
  const std::optional<DeviceFingerprint> gpu = kernels::current_cuda_fingerprint();
  set_table(db::RecommendationTable::load(path, cpu, versions,
                                          gpu ? std::vector<std::string>{gpu->key()}
                                              : std::vector<std::string>{}));
  // A GPU's rows (ka-tune --device cuda) go to its own table: CUDA kernels look there.
  if (gpu) {
    extractor().set_table(std::make_shared<const db::RecommendationTable>(
                              db::RecommendationTable::load(path, gpu->key(), versions, {cpu})),
                          DeviceType::kCUDA);
  }
}

void Runtime::set_table(db::RecommendationTable table) const {
  extractor().set_table(std::make_shared<const db::RecommendationTable>(std::move(table)));
}

std::size_t Runtime::use_compiled_table(const db::CompiledRecommendation* rows, std::size_t count,
                                        std::string_view device_json) const {
  const db::KernelVersions versions = extractor().kernel_versions();
  const std::optional<DeviceFingerprint> gpu = kernels::current_cuda_fingerprint();
  const bool for_gpu = gpu && count != 0 && gpu->key() == rows[0].fingerprint;
  const std::string device = for_gpu ? gpu->key() : cpu_fingerprint().key();
  auto table = std::make_shared<const db::RecommendationTable>(
      db::RecommendationTable::from_compiled(rows, count, device, versions, device_json));
  const std::size_t kept = table->size();
  extractor().set_table(std::move(table), for_gpu ? DeviceType::kCUDA : DeviceType::kCPU);
  return kept;
}

dispatch::Stack Runtime::call(std::string_view op, dispatch::Stack args) const {
  const auto handle = dispatch::Dispatcher::singleton().find_op_or_throw(op);
  handle.call_boxed(&args);
  return args;
}

namespace {

// The node's exact overload ("aten::add.Tensor"), or its kind for a node without a schema
// ("prim::ListUnpack").
std::string signature_of(const torch::jit::Node& node) {
  const c10::FunctionSchema* schema = node.maybeSchema();
  if (schema == nullptr) return node.kind().toQualString();
  std::string s = schema->name();
  if (!schema->overload_name().empty()) s += "." + schema->overload_name();
  return s;
}

// A prim::Constant's value; nullopt when libtorch cannot make one. IR such as
// `prim::Constant[valu="x"]()` parses, but toIValue then throws torch::jit::IRAttributeError
// (not a ka::Error): refuse it as bad input.
std::optional<c10::IValue> constant_value(const torch::jit::Node& node) {
  try {
    return torch::jit::toIValue(node.output());
  } catch (const std::exception& e) {
    KA_THROW(ValueError, "graph constant %", node.output()->debugName(), " has no valid value: ",
             e.what());
  }
}

bool holds_tensor(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return true;
  const auto contained = type->containedTypes();
  return std::any_of(contained.begin(), contained.end(), holds_tensor);
}

// Note [What a fallback reads]
// A node reads only metadata (OpGraph::Reads::kMetadata, Note [Fallback nodes]) when
//  - it is list or tuple glue, or asks a tensor for its sizes, dimensions or device;
//  - none of its inputs holds a tensor (int arithmetic, NumToTensor, factories);
//  - or its schema makes it a view: every output that holds a tensor is annotated as an alias
//    of an input, and nothing is written (view, transpose, split, select, expand, ...).
// A view whose kernel may copy (reshape, contiguous, to) is one by its schema; the extractor
// checks that its outputs alias its inputs and otherwise runs it again once its inputs' data
// is written.
// List and tuple glue and the nodes that ask a tensor or object for its metadata.
bool is_glue(const torch::jit::Node& node) {
  static const std::unordered_set<c10::Symbol> glue = {
      c10::prim::ListConstruct, c10::prim::ListUnpack,  c10::prim::TupleConstruct,
      c10::prim::TupleUnpack,   c10::prim::TupleIndex,  c10::prim::DictConstruct,
      c10::prim::device,
      c10::prim::GetAttr,
      c10::prim::dtype,         c10::aten::size,        c10::aten::dim,
      c10::aten::len,           c10::aten::__getitem__, c10::Symbol::fromQualString("aten::numel"),
      c10::prim::layout};
  return glue.count(node.kind()) != 0;
}

extractor::OpGraph::Reads reads_of(const torch::jit::Node& node) {
  using OpGraph = extractor::OpGraph;
  if (is_glue(node)) return OpGraph::Reads::kMetadata;
  const auto inputs = node.inputs();
  if (std::none_of(inputs.begin(), inputs.end(),
                   [](const torch::jit::Value* v) { return holds_tensor(v->type()); })) {
    return OpGraph::Reads::kMetadata;
  }
  const c10::FunctionSchema* schema = node.maybeSchema();
  if (schema == nullptr) return OpGraph::Reads::kData;
  for (const c10::Argument& a : schema->arguments()) {
    if (a.alias_info() != nullptr && a.alias_info()->isWrite()) return OpGraph::Reads::kData;
  }
  bool returns_tensor = false;
  for (const c10::Argument& r : schema->returns()) {
    if (!holds_tensor(r.type())) continue;
    returns_tensor = true;
    if (r.alias_info() == nullptr || r.alias_info()->isWrite()) return OpGraph::Reads::kData;
  }
  return returns_tensor ? OpGraph::Reads::kMetadata : OpGraph::Reads::kData;
}

// Note [Interpreter instructions]
// libtorch's interpreter runs list, tuple and dict glue and attribute reads as instructions of
// its own, not as registered operators (Node::getOperation throws for them, and the functions
// it uses are not exported), so ka runs those itself, as the interpreter does.
std::optional<extractor::OpGraph::Fallback> instruction_of(const torch::jit::Node& node) {
  using Stack = std::vector<c10::IValue>;
  const std::size_t num_outputs = node.outputs().size();
  // How the glue's errors name the node: "prim::ListUnpack (%q.1)".
  const auto describe = [&] {
    return std::string(node.kind().toQualString()) + " (%" +
           (num_outputs == 0 ? std::string("?") : node.outputs()[0]->debugName()) + ")";
  };
  switch (node.kind()) {
    case c10::prim::ListConstruct: {
      const auto list_type =
          num_outputs == 1 ? node.output()->type()->cast<c10::ListType>() : nullptr;
      KA_CHECK(list_type != nullptr, describe(), " does not make one List");
      return [element = list_type->getElementType()](Stack& stack) {
        c10::impl::GenericList list(element);
        list.reserve(stack.size());
        for (c10::IValue& v : stack) list.push_back(std::move(v));
        stack.assign(1, c10::IValue(std::move(list)));
      };
    }
    case c10::prim::ListUnpack:
      return [num_outputs, where = describe()](Stack& stack) {
        const c10::List<c10::IValue> list = stack.at(0).toList();
        KA_CHECK(list.size() == num_outputs, where, ": a list of ", list.size(),
                 " items cannot unpack into ", num_outputs, " values");
        stack.assign(list.begin(), list.end());
      };
    case c10::prim::TupleConstruct: {
      const auto tuple = node.output()->type()->cast<c10::TupleType>();
      const bool named = tuple && tuple->schema();
      return [tuple, named](Stack& stack) {
        c10::IValue t = named ? c10::ivalue::Tuple::createNamed(std::move(stack), tuple)
                              : c10::ivalue::Tuple::create(std::move(stack));
        stack.assign(1, std::move(t));
      };
    }
    case c10::prim::TupleUnpack:
      return [num_outputs, where = describe()](Stack& stack) {
        const auto elements = stack.at(0).toTupleRef().elements().vec();
        KA_CHECK(elements.size() == num_outputs, where, ": a tuple of ", elements.size(),
                 " items cannot unpack into ", num_outputs, " values");
        stack = elements;
      };
    case c10::prim::TupleIndex:
      return [where = describe()](Stack& stack) {
        const auto& elements = stack.at(0).toTupleRef().elements();
        const auto n = static_cast<std::int64_t>(elements.size());
        std::int64_t i = stack.at(1).toInt();
        if (i < 0) i += n;
        KA_CHECK(i >= 0 && i < n, where, ": index ", stack.at(1).toInt(), " of a tuple of ", n);
        c10::IValue item = elements[static_cast<std::size_t>(i)];
        stack.assign(1, std::move(item));
      };
    case c10::prim::DictConstruct: {
      // Keys and values alternate on the stack, in the order the dict keeps them (a model's
      // output dict: {"logits": ..., "hidden_states": ...}).
      const auto type = node.output()->type()->cast<c10::DictType>();
      KA_CHECK(type != nullptr, describe(), " does not make a Dict");
      return [type](Stack& stack) {
        c10::impl::GenericDict dict(type->getKeyType(), type->getValueType());
        dict.reserve(stack.size() / 2);
        for (std::size_t i = 0; i + 1 < stack.size(); i += 2) {
          dict.insert_or_assign(std::move(stack[i]), std::move(stack[i + 1]));
        }
        stack.assign(1, c10::IValue(std::move(dict)));
      };
    }
    case c10::prim::GetAttr: {
      KA_CHECK(node.hasAttribute(c10::attr::name) &&
                   node.kindOf(c10::attr::name) == torch::jit::AttributeKind::s,
               describe(), " names no attribute");
      const std::string name = node.s(c10::attr::name);
      return [name](Stack& stack) {
        c10::IValue attr = stack.at(0).toObjectRef().getAttr(name);
        stack.assign(1, std::move(attr));
      };
    }
    default:
      return std::nullopt;
  }
}

// libtorch's own kernel for the node: one of the interpreter's instructions that ka runs itself
// (Note [Interpreter instructions]) or its registered operator, called boxed; nullopt for a
// node only the interpreter can run (blocks, calls).
std::optional<extractor::OpGraph::Fallback> fallback_of(const torch::jit::Node& node) {
  if (!node.blocks().empty()) return std::nullopt;
  if (auto instruction = instruction_of(node)) return instruction;
  try {
    return [op = node.getOperation()](std::vector<c10::IValue>& stack) mutable { op(stack); };
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// `inspect(node)`, with libtorch's own errors about the node made ka's, naming it: its accessors
// assert what a well-formed node holds (an attribute of a kind, a schema that matches), and
// IR text from a suite file need not hold it.
template <typename Inspect>
auto checked_node(const torch::jit::Node& node, int position, Inspect&& inspect) {
  const auto where = [&] {
    return "graph node " + std::to_string(position) + " (" + node.kind().toQualString() + ")";
  };
  try {
    return inspect();
  } catch (const Error&) {
    throw;
  } catch (const c10::Error& e) {
    KA_THROW(ValueError, where(), ": ", e.what_without_backtrace());
  } catch (const std::exception& e) {
    KA_THROW(ValueError, where(), ": ", e.what());
  }
}

// A list whose items are all known ints (shapes, dims) is folded into one value.
std::optional<c10::IValue> folded_int_list(const torch::jit::Node& node,
                                           const extractor::OpGraph& g,
                                           const std::unordered_map<const torch::jit::Value*, int>& index) {
  if (node.kind() != c10::prim::ListConstruct || node.outputs().size() != 1) return std::nullopt;
  c10::List<std::int64_t> items;
  for (const torch::jit::Value* in : node.inputs()) {
    const auto it = index.find(in);
    if (it == index.end()) return std::nullopt;
    const c10::IValue& v = g.values[static_cast<std::size_t>(it->second)];
    if (!v.isInt() || in->node()->kind() != c10::prim::Constant) return std::nullopt;
    items.push_back(v.toInt());
  }
  return c10::IValue(items);
}

// Whether `node` writes one of its arguments (in place or out=): its schema says so. A node
// without a schema other than glue (prim::SetAttr, say) is taken to write: nothing says it
// does not.
bool writes_an_argument(const torch::jit::Node& node) {
  const c10::FunctionSchema* schema = node.maybeSchema();
  if (schema == nullptr) return !is_glue(node);
  const auto& args = schema->arguments();
  return std::any_of(args.begin(), args.end(), [](const c10::Argument& a) {
    return a.alias_info() != nullptr && a.alias_info()->isWrite();
  });
}

// Whether `node`, which writes an argument, writes one whose data is constant (`constant_data`
// per value; `inputs` the node's input values): its schema's written arguments, or every
// input of a node without a schema.
bool writes_constant_data(const torch::jit::Node& node, const std::vector<int>& inputs,
                          const std::vector<bool>& constant_data) {
  const c10::FunctionSchema* schema = node.maybeSchema();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const bool written = schema == nullptr ||
                         (i < schema->arguments().size() &&
                          schema->arguments()[i].alias_info() != nullptr &&
                          schema->arguments()[i].alias_info()->isWrite());
    if (written && constant_data[static_cast<std::size_t>(inputs[i])]) return true;
  }
  return false;
}

// Note [Hoisted metadata nodes]
// A node that reads only metadata (Note [What a fallback reads]: a view, size, list glue,
// int arithmetic) moves up to just after the last node that defines one of its inputs, or
// writes an argument. It runs during extraction wherever it stands (Note [Fallback nodes]),
// but where it stood it split the run of ka's nodes around it into two segments planned
// apart: `scores / sqrt(d) + mask[:T, :T]` slices the mask between the division and the add,
// and attention could not fuse. A node that reads data moves too when the tensors it reads
// hold only constant data (constants, a frozen module's buffers, and what such nodes made of
// them): GPT-2's `masked_fill(bias[:, :, :T, :T] == 0, ...)` computes its mask from a buffer
// between the scale and the masked_fill, and as a data fallback there it would also wait for
// every task before it. The moves are safe: the nodes a moved node passes do not define what
// it reads, and none writes an argument (an in-place op may change data or resize); it never
// moves above those. A nondeterministic node (a random factory) stays where it is, so random
// numbers are drawn in libtorch's order. Moved nodes keep their order among themselves;
// every other node keeps its place. Node indices in --explain are those of the lowered
// graph, after the move.
// `writes[i]`: node i writes an argument; `movable[i]`: it may move (see the Note).
void hoist_metadata_nodes(extractor::OpGraph& g, const std::vector<bool>& writes,
                          const std::vector<bool>& movable) {
  const std::size_t n = g.nodes.size();
  // Sort key per node: (after which fixed node, then original index). Fixed node i is
  // (i + 1, 0); a movable node (a, i + 1) goes right after fixed node a - 1, the latest
  // one it must follow (a = 0: before every node).
  std::vector<std::pair<std::size_t, std::size_t>> key(n);
  std::vector<std::size_t> defined_after(g.values.size(), 0);  // 0: before every node
  std::size_t last_write = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const extractor::OpGraph::Node& node = g.nodes[i];
    std::size_t after = last_write;
    for (int v : node.inputs) after = std::max(after, defined_after[static_cast<std::size_t>(v)]);
    if (movable[i]) {
      key[i] = {after, i + 1};
    } else {
      key[i] = {i + 1, 0};
      if (writes[i]) last_write = i + 1;
    }
    for (int v : node.outputs) defined_after[static_cast<std::size_t>(v)] = key[i].first;
  }
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return key[a] < key[b]; });
  std::vector<extractor::OpGraph::Node> nodes;
  nodes.reserve(n);
  for (std::size_t i : order) nodes.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(nodes);
}

// " on aten::gt": what an if's condition or a loop's trip count comes from, for messages.
std::string condition_of(const torch::jit::Node& node) {
  if (node.blocks().empty() || node.inputs().empty()) return "";
  const torch::jit::Value* cond = node.input(0);
  const torch::jit::Node* from = cond->node();
  if (from->kind() == c10::prim::Param) return " on input %" + cond->debugName();
  if (from->kind() == c10::aten::__not__ && !from->inputs().empty()) from = from->input(0)->node();
  return std::string(" on ") + from->kind().toQualString();
}

}  // namespace

extractor::OpGraph Runtime::lower(torch::jit::Graph& graph, const std::vector<c10::IValue>& inputs) {
  std::string why;
  std::optional<extractor::OpGraph> g = try_lower(graph, inputs, why);
  KA_CHECK_TYPE(NotImplementedError, g.has_value(), "graph ", why);
  return std::move(*g);
}

std::optional<extractor::OpGraph> Runtime::try_lower(torch::jit::Graph& graph,
                                                     const std::vector<c10::IValue>& inputs,
                                                     std::string& why) {
  KA_CHECK(inputs.size() == graph.inputs().size(), "graph takes ", graph.inputs().size(),
           " inputs, got ", inputs.size());
  // Note [Control flow settled by the inputs] (settled_graph.cpp).
  if (std::shared_ptr<torch::jit::Graph> settled = detail::settled_by_inputs(graph, inputs)) {
    std::optional<extractor::OpGraph> g = lower_straight(*settled, inputs, why);
    if (g) g->source = std::move(settled);
    return g;
  }
  return lower_straight(graph, inputs, why);
}

std::optional<extractor::OpGraph> Runtime::lower_straight(torch::jit::Graph& graph,
                                                          const std::vector<c10::IValue>& inputs,
                                                          std::string& why) {
  extractor::OpGraph g;
  std::unordered_map<const torch::jit::Value*, int> index;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    index[graph.inputs()[i]] = static_cast<int>(g.values.size());
    g.values.push_back(inputs[i]);
  }
  auto value_of = [&](const torch::jit::Value* v) {
    const auto it = index.find(v);
    KA_CHECK(it != index.end(), "graph value %", v->debugName(), " is used before it is defined");
    return it->second;
  };
  auto define = [&](const torch::jit::Value* v, c10::IValue value) {
    index[v] = static_cast<int>(g.values.size());
    g.values.push_back(std::move(value));
    return index[v];
  };
  int position = 0;
  // Per value: whether its data is constant (Note [Hoisted metadata nodes]).
  std::vector<bool> constant_data(g.values.size(), false);
  const auto define_constant = [&](const torch::jit::Value* v, c10::IValue value) {
    define(v, std::move(value));
    constant_data.resize(g.values.size(), false);
    constant_data.back() = true;
  };
  std::vector<bool> writes;
  std::vector<bool> movable;
  bool writes_constants = false;  // a node writes constant data (or a view of it)
  for (torch::jit::Node* node : graph.nodes()) {
    ++position;
    if (node->kind() == c10::prim::Constant) {
      // Before node->output(), which asserts (c10::Error) on any other count.
      KA_CHECK(node->outputs().size() == 1, "graph constant has ", node->outputs().size(),
               " outputs");
      const auto v = constant_value(*node);
      KA_CHECK(v.has_value(), "graph constant %", node->output()->debugName(), " has no value");
      define_constant(node->output(), *v);
      if (v->isTensor()) {
        g.run_constants.resize(g.values.size(), false);
        g.run_constants.back() = true;
      }
      continue;
    }
    if (auto list = folded_int_list(*node, g, index)) {
      define_constant(node->output(), std::move(*list));
      continue;
    }
    std::optional<extractor::OpGraph::Fallback> fallback =
        checked_node(*node, position - 1, [&] { return fallback_of(*node); });
    if (!fallback) {
      why = "node " + std::to_string(position - 1) + " (" + node->kind().toQualString() +
            condition_of(*node) + ") " +
            (node->blocks().empty() ? "is an instruction only libtorch's interpreter runs"
                                    : "is control flow ka does not flatten");
      return std::nullopt;
    }
    extractor::OpGraph::Node n;
    n.signature = checked_node(*node, position - 1, [&] { return signature_of(*node); });
    bool reads_constants = true;  // every tensor it reads holds constant data
    for (const torch::jit::Value* in : node->inputs()) {
      n.inputs.push_back(value_of(in));
      if (holds_tensor(in->type())) {
        reads_constants = reads_constants && constant_data[static_cast<std::size_t>(n.inputs.back())];
      }
    }
    const bool writes_arg = writes_an_argument(*node);
    const bool pure = !writes_arg && !node->isNondeterministic();
    writes_constants = writes_constants || (writes_arg && writes_constant_data(*node, n.inputs, constant_data));
    for (const torch::jit::Value* out : node->outputs()) n.outputs.push_back(define(out, {}));
    constant_data.resize(g.values.size(), pure && reads_constants);
    n.fallback = std::move(*fallback);
    n.reads = reads_of(*node);
    writes.push_back(writes_arg);
    movable.push_back(pure && (n.reads == extractor::OpGraph::Reads::kMetadata || reads_constants));
    g.nodes.push_back(std::move(n));
  }
  for (const torch::jit::Value* out : graph.outputs()) g.outputs.push_back(value_of(out));
  // All of a run is extracted before its tasks run: a weight packed then would miss a write
  // a node makes later in the same run (Note [Constant weights packed once]).
  if (writes_constants) g.run_constants.clear();
  g.writes_arguments = std::find(writes.begin(), writes.end(), true) != writes.end();
  hoist_metadata_nodes(g, writes, movable);
  return g;
}

GraphResult Runtime::run_graph(torch::jit::Graph& graph, const std::vector<c10::IValue>& inputs,
                               const extractor::GraphOptions& options) const {
  std::string why;
  std::optional<extractor::OpGraph> g = try_lower(graph, inputs, why);
  if (!g) return run_in_interpreter(graph, inputs, why);
  return run_lowered(*g, options);
}

GraphResult Runtime::run_lowered(extractor::OpGraph& graph,
                                 const extractor::GraphOptions& options) const {
  GraphResult r;
  r.tasks = extractor().run_graph(graph, options);
  for (int v : graph.outputs) r.outputs.push_back(graph.values[static_cast<std::size_t>(v)]);
  return r;
}

Runtime::InterpretedGraph Runtime::interpret(torch::jit::Graph& graph, std::string why) {
  InterpretedGraph g;
  g.code = std::make_shared<const torch::jit::Code>(graph.copy(), "ka_fallback");
  g.nodes = static_cast<std::size_t>(std::distance(graph.nodes().begin(), graph.nodes().end()));
  g.why = std::move(why);
  return g;
}

GraphResult Runtime::run_in_interpreter(const InterpretedGraph& graph,
                                        const std::vector<c10::IValue>& inputs) {
  KA_CHECK(inputs.size() == graph.code->num_inputs(), "graph takes ", graph.code->num_inputs(),
           " inputs, got ", inputs.size());
  log().debug("graph runs in libtorch's interpreter: {}", graph.why);
  GraphResult r;
  extractor::TaskPlan plan;
  plan.pattern = "graph";
  for (std::size_t i = 0; i < graph.nodes; ++i) plan.nodes.push_back(static_cast<int>(i));
  plan.kernel = "torch::jit interpreter";
  plan.device = "cpu";
  plan.provenance = db::Provenance::kFallback;
  plan.fallback = "the whole graph runs in libtorch's interpreter: " + graph.why;
  std::vector<c10::IValue> stack = inputs;
  try {
    torch::jit::InterpreterState(*graph.code).run(stack);
  } catch (const c10::Error& e) {
    KA_THROW(ValueError, "graph (libtorch's interpreter, because ", graph.why,
             "): ", e.what_without_backtrace());
  }
  r.outputs = std::move(stack);
  r.tasks.push_back(std::move(plan));
  return r;
}

GraphResult Runtime::run_in_interpreter(torch::jit::Graph& graph,
                                        const std::vector<c10::IValue>& inputs,
                                        const std::string& why) {
  return run_in_interpreter(interpret(graph, why), inputs);
}

GraphResult Runtime::run_graph(const std::string& ir, const std::vector<c10::IValue>& inputs,
                               const extractor::GraphOptions& options) const {
  return run_graph(*parse_ir(ir), inputs, options);
}

}  // namespace ka::runtime
