// Runtime: eager calls through ka's dispatcher; TorchScript graphs lowered to OpGraph.
#include <ka/core/error.hpp>
#include <ka/core/fingerprint.hpp>
#include <ka/core/logging.hpp>
#include <ka/dispatch/dispatcher.hpp>
#include <ka/kernels/cuda_limits.hpp>
#include <ka/runtime/aten_ops.hpp>
#include <ka/runtime/runtime.hpp>

#include <torch/csrc/jit/ir/ir.h>

#include <cstdlib>
#include <optional>
#include <unordered_map>

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

std::string signature_of(const torch::jit::Node& node) {
  const c10::FunctionSchema* schema = node.maybeSchema();
  KA_CHECK_TYPE(NotImplementedError, schema != nullptr, "graph node ", node.kind().toQualString(),
                " has no schema ka knows");
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

}  // namespace

extractor::OpGraph Runtime::lower(torch::jit::Graph& graph, const std::vector<c10::IValue>& inputs) {
  extractor::OpGraph g;
  std::unordered_map<const torch::jit::Value*, int> index;
  KA_CHECK(inputs.size() == graph.inputs().size(), "graph takes ", graph.inputs().size(),
           " inputs, got ", inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    index[graph.inputs()[i]] = static_cast<int>(g.values.size());
    g.values.push_back(inputs[i]);
  }
  auto value_of = [&](const torch::jit::Value* v) {
    const auto it = index.find(v);
    KA_CHECK(it != index.end(), "graph value %", v->debugName(), " is used before it is defined");
    return it->second;
  };
  for (torch::jit::Node* node : graph.nodes()) {
    const auto kind = node->kind();
    // Before node->output(), which asserts (c10::Error) on any other count.
    KA_CHECK_TYPE(NotImplementedError, node->outputs().size() == 1, "graph node ",
                  kind.toQualString(), " has ", node->outputs().size(),
                  " outputs; ka extracts single-output ops");
    if (kind == c10::prim::Constant) {
      const auto v = constant_value(*node);
      KA_CHECK(v.has_value(), "graph constant %", node->output()->debugName(), " has no value");
      index[node->output()] = static_cast<int>(g.values.size());
      g.values.push_back(*v);
      continue;
    }
    if (kind == c10::prim::ListConstruct) {
      // Lists of ints (shapes, dims) are folded into one value; their items must be known.
      c10::List<std::int64_t> items;
      for (const torch::jit::Value* in : node->inputs()) {
        const c10::IValue& v = g.values[static_cast<std::size_t>(value_of(in))];
        KA_CHECK_TYPE(NotImplementedError, v.isInt(), "graph node prim::ListConstruct (%",
                      node->output()->debugName(), "): only lists of ints are supported");
        items.push_back(v.toInt());
      }
      index[node->output()] = static_cast<int>(g.values.size());
      g.values.emplace_back(items);
      continue;
    }
    extractor::OpGraph::Node n;
    n.signature = signature_of(*node);
    for (const torch::jit::Value* in : node->inputs()) n.inputs.push_back(value_of(in));
    index[node->output()] = static_cast<int>(g.values.size());
    n.outputs.push_back(static_cast<int>(g.values.size()));
    g.values.emplace_back();
    g.nodes.push_back(std::move(n));
  }
  for (const torch::jit::Value* out : graph.outputs()) g.outputs.push_back(value_of(out));
  return g;
}

GraphResult Runtime::run_graph(torch::jit::Graph& graph, const std::vector<c10::IValue>& inputs,
                               const extractor::GraphOptions& options) const {
  extractor::OpGraph g = lower(graph, inputs);
  GraphResult r;
  r.tasks = extractor().run_graph(g, options);
  for (int v : g.outputs) r.outputs.push_back(g.values[static_cast<std::size_t>(v)]);
  return r;
}

GraphResult Runtime::run_graph(const std::string& ir, const std::vector<c10::IValue>& inputs,
                               const extractor::GraphOptions& options) const {
  return run_graph(*parse_ir(ir), inputs, options);
}

}  // namespace ka::runtime
