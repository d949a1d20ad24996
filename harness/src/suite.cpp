#include "graph_nodes.hpp"
#include "model.hpp"

#include <ka/core/dtype.hpp>
#include <ka/core/error.hpp>
#include <ka/core/memory_limit.hpp>
#include <ka/harness/suite.hpp>
#include <ka/runtime/parse_ir.hpp>

#include <torch/csrc/jit/ir/ir.h>
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>


#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <unordered_set>

namespace ka::harness {
namespace fs = std::filesystem;
namespace {

// Note [Suite file format]
//   suite: matmul
//   description: ...
//   graphs:                      # optional: TorchScript IR templates for graph cases
//     residual_layer_norm: |
//       graph(%x : Tensor, %res : Tensor, %w : Tensor, %b : Tensor):
//         %n : int = prim::Constant[value=${HIDDEN}]()
//         ...
//   groups:
//     - model: BERT-base (hidden 768, FFN 3072)
//       cases:
//         - {name: bert_qkv_512, op: aten::addmm, M: 512, K: 768, N: 768, dtype: float32, tag:
//         prefill}
//         - {name: bert_ln_512, graph: residual_layer_norm, params: {HIDDEN: 768},
//            inputs: {x: [512, 768], res: [512, 768], w: [768], b: [768]}}
//   models:                      # optional: TorchScript modules for module cases
//     gpt2_block: gpt2_block.pt  # beside the suite file, or in model_search_path()
//   ...
//         - {name: gpt2_block_128, module: gpt2_block, inputs: {x: [1, 128, 768]}}
// An op case: `name` is optional (default: <op short name>_<M>x<K>x<N>); alpha/beta are
// optional (1.0). A graph case names a template of `graphs:`; every ${NAME} in it is replaced
// by the case's integer param NAME (a param the template does not use is an error, as it is
// most likely a typo). `inputs` gives every graph input a shape, either `[d0, d1, ...]` or
// `{shape: [...], fill: randn|mask|causal, dtype: float32|int64|int32|bool, range: [LOW,
// HIGH]}`; inputs are fp32, filled with randn, except that an input named `mask` defaults to
// fill: mask (0 or -1e4); causal is -inf above the diagonal of its last two dims and 0
// elsewhere. Integer inputs (token ids, positions, a 0/1 attention mask) are uniform in
// [LOW, HIGH) (default [0, 2)), booleans 0 or 1. `rtol` and `atol` (default 1e-4
// each) set the correctness check, atol relative to the reference output's root mean square.
// A module case names an entry of `models:`, a file torch::jit::load reads (made by
// torch.jit.script or torch.jit.trace and saved); ka-bench freezes it and runs its forward
// with `inputs`, given as for a graph case but checked against forward's arguments when the
// case is made (the file is only loaded then). A module's non-tensor argument takes a value
// instead of a shape, `n: 3` or `{value: 3}` (an int, a float, true, false, or null for None,
// e.g. an Optional[Tensor] mask left out); an argument not given takes forward's default.
//
// Bounds, checked before anything is allocated (each refusal names the file, line and limit):
// a dimension is 0 .. 2^24, a graph input has at most 8 dimensions and 2^31 elements (a shape
// whose element count overflows int64 is refused as such), a graph has at most
// kMaxGraphNodes (200,000) nodes (see Note [Graph node limit]), and the tensors of one case
// fit in three quarters of the memory available when the suite is loaded (see
// memory_limit_bytes() and case_tensor_bytes()).

// Note [Graph node limit]
// ka's own passes over a graph (IR checks, fusion_view, FusionChecker::plan, extraction, the
// executor's hazard tracking) are loops, linear in the node count. libtorch 1.13's
// interpreter, ka-bench's reference, is not: torch::jit::Code::Code recurses about four
// frames per node of a dependency chain, so a chain of 9,900 adds overflowed the default
// 8 MiB stack (SIGSEGV). GraphCase therefore builds the interpreter's Code on a thread whose
// stack is sized for the graph (see Note [Reference stack] in graph_case.cpp), and the suite
// caps graphs at kMaxGraphNodes nodes so that stack (and the interpreter's time and memory)
// stays bounded: 200,000 chained nodes need about 170 MiB of stack (reserved: 790 MiB).

[[noreturn]] void fail_at_line(const std::string& path, int line, const std::string& what) {
  KA_THROW(ValueError, path, ":", line, ": ", what);
}

[[noreturn]] void fail(const std::string& path, const YAML::Mark& mark, const std::string& what) {
  // yaml-cpp marks are 0-based; editors count from 1.
  fail_at_line(path, mark.line + 1, what);
}

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

// A mapping key as text. yaml-cpp's as<std::string>() throws its own "bad conversion" (no file
// name) for a key that is a mapping or a list: refuse such a key here, naming its line.
std::string key_of(const std::string& path, const YAML::Node& key) {
  if (!key.IsScalar() && !key.IsNull()) {
    fail(path, key.Mark(), "a key must be a plain name, not a mapping or a list");
  }
  return key.as<std::string>();
}

void check_keys(const std::string& path, const YAML::Node& node,
                const std::set<std::string>& allowed, const char* where) {
  for (const auto& kv : node) {
    const auto key = key_of(path, kv.first);
    if (allowed.count(key) == 0) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      fail(path, kv.first.Mark(), "unknown key '" + key + "' in " + where + " (allowed: " + list + ")");
    }
  }
}

template <typename T>
T scalar(const std::string& path, const YAML::Node& parent, const char* key, const char* what) {
  const YAML::Node node = parent[key];
  if (!node) fail(path, parent.Mark(), std::string(what) + " has no '" + key + "'");
  if (!node.IsScalar()) fail(path, node.Mark(), std::string("'") + key + "' must be a scalar");
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    fail(path, node.Mark(), std::string("bad value '") + node.Scalar() + "' for '" + key + "'");
  }
}

std::int64_t dimension(const std::string& path, const YAML::Node& c, const char* key) {
  const auto v = scalar<std::int64_t>(path, c, key, "case");
  if (v < 0 || v > (std::int64_t{1} << 24)) {
    fail(path, c[key].Mark(), std::string(key) + " = " + std::to_string(v) +
                                  " is out of range (0 .. 16777216)");
  }
  return v;
}

bool is_identifier(const std::string& s) {
  return !s.empty() && (std::isalpha(static_cast<unsigned char>(s[0])) != 0 || s[0] == '_') &&
         std::all_of(s.begin(), s.end(), [](char ch) {
           return std::isalnum(static_cast<unsigned char>(ch)) != 0 || ch == '_';
         });
}

std::map<std::string, GraphTemplate> load_graphs(const std::string& path,
                                                 const YAML::Node& graphs) {
  if (!graphs.IsMap())
    fail(path, graphs.Mark(), "'graphs' must be a mapping of name to TorchScript IR");
  std::map<std::string, GraphTemplate> out;
  for (const auto& kv : graphs) {
    const auto name = key_of(path, kv.first);
    if (!is_identifier(name)) {
      fail(path, kv.first.Mark(), "graph name '" + name + "' may only hold letters, digits and _");
    }
    if (!kv.second.IsScalar() || kv.second.Scalar().empty()) {
      fail(path, kv.second.Mark(),
           "graph '" + name + "' must be TorchScript IR text (use a block scalar: |)");
    }
    out[name] = GraphTemplate{kv.second.Scalar(), kv.first.Mark().line + 1};
  }
  return out;
}

// Replaces every ${NAME} of the template by the case's param NAME.
std::string instantiate(const std::string& path, const YAML::Node& c, const std::string& graph,
                        const GraphTemplate& t, const std::map<std::string, std::int64_t>& params) {
  std::string out;
  std::set<std::string> used;
  std::size_t pos = 0;
  for (;;) {
    const std::size_t at = t.ir.find("${", pos);
    if (at == std::string::npos) break;
    const std::size_t end = t.ir.find('}', at);
    const std::string name = end == std::string::npos ? "" : t.ir.substr(at + 2, end - at - 2);
    if (!is_identifier(name)) {
      fail_at_line(path, t.line,
                   "graph '" + graph + "' has a malformed placeholder near '" +
                       t.ir.substr(at, 20) + "' (expected ${NAME})");
    }
    const auto it = params.find(name);
    if (it == params.end()) {
      fail(path, c.Mark(),
           "graph '" + graph + "' uses ${" + name + "} but the case's 'params' do not set " + name);
    }
    out.append(t.ir, pos, at - pos);
    out += std::to_string(it->second);
    used.insert(name);
    pos = end + 1;
  }
  out.append(t.ir, pos, std::string::npos);
  for (const auto& kv : c["params"]) {
    const auto name = key_of(path, kv.first);
    if (used.count(name) == 0) {
      fail(path, kv.first.Mark(), "param '" + name + "' is not used by graph '" + graph + "'");
    }
  }
  return out;
}

std::optional<InputDtype> input_dtype_named(const std::string& name) {
  for (const InputDtype d : kInputDtypes) {
    if (name == to_string(d)) return d;
  }
  return std::nullopt;
}

// "float32, int64, ..., uint8".
std::string input_dtype_names() {
  std::string s;
  for (const InputDtype d : kInputDtypes) s += (s.empty() ? "" : ", ") + std::string(to_string(d));
  return s;
}

InputFill parse_fill(const std::string& path, const YAML::Node& node, const std::string& input) {
  const std::string fill = node.IsScalar() ? node.Scalar() : "";
  for (const InputFill f : {InputFill::kRandn, InputFill::kMask, InputFill::kCausal}) {
    if (fill == to_string(f)) return f;
  }
  fail(path, node.Mark(),
       "bad fill '" + fill + "' for input '" + input + "' (randn, mask or causal)");
}

// The element count of `shape`; refuses one that overflows int64 (a zero size makes it 0).
std::int64_t checked_numel(const std::string& path, const YAML::Mark& mark,
                           const std::string& name, const std::vector<std::int64_t>& shape) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  std::int64_t numel = 1;
  for (const std::int64_t d : shape) {
    if (__builtin_mul_overflow(numel, d, &numel)) {
      fail(path, mark,
           "the element count of input '" + name + "' overflows int64 (limit " +
               std::to_string(std::numeric_limits<std::int64_t>::max()) + ")");
    }
  }
  return numel;
}

InputDtype parse_input_dtype(const std::string& path, const YAML::Node& node,
                             const std::string& input) {
  const std::string dtype = node.IsScalar() ? node.Scalar() : "";
  if (const auto d = input_dtype_named(dtype)) return *d;
  fail(path, node.Mark(),
       "bad dtype '" + dtype + "' for input '" + input + "' (" + input_dtype_names() + ")");
}

// An integer input's 'range': [LOW, HIGH], values drawn from LOW to HIGH - 1.
void parse_range(const std::string& path, const YAML::Node& node, GraphInput& in) {
  const std::string what = "the range of input '" + in.name + "'";
  if (!node.IsSequence() || node.size() != 2) {
    fail(path, node.Mark(), what + " must be [LOW, HIGH], e.g. [0, 30522] for token ids");
  }
  try {
    in.low = node[0].as<std::int64_t>();
    in.high = node[1].as<std::int64_t>();
  } catch (const YAML::Exception&) {
    fail(path, node.Mark(), what + " must be two integers, [LOW, HIGH]");
  }
}

// An input given as a value (`n: 3`, `mask: null`, `n: {value: 3}`) rather than a shape.
GraphInput value_input(const std::string& path, const std::string& name, const YAML::Node& node) {
  GraphInput in;
  in.name = name;
  const std::string text = node.IsNull() ? "none" : node.IsScalar() ? node.Scalar() : "";
  const std::optional<InputValue> v = parse_input_value(text);
  if (!v) {
    fail(path, node.Mark(),
         "bad value '" + text + "' for input '" + name +
             "' (an int, a float, true, false or none; a tensor input takes a shape, e.g. [1, 128])");
  }
  in.value = *v;
  return in;
}

GraphInput graph_input(const std::string& path, const std::string& name, const YAML::Node& node) {
  if (node.IsScalar() || node.IsNull()) return value_input(path, name, node);
  if (node.IsMap() && node["value"]) {
    check_keys(path, node, {"value"}, "a value input");
    return value_input(path, name, node["value"]);
  }
  GraphInput in;
  in.name = name;
  // Node::operator= would overwrite the node it refers to (yaml-cpp's reference semantics).
  YAML::Node shape;
  shape.reset(node);
  if (node.IsMap()) {
    check_keys(path, node, {"shape", "fill", "dtype", "range"}, "an input");
    // Checked before reset(): a key the map lacks is an invalid node, which reset() throws on.
    const YAML::Node given = node["shape"];
    if (!given) fail(path, node.Mark(), "input '" + name + "' has no 'shape'");
    shape.reset(given);
    if (node["fill"]) in.fill = parse_fill(path, node["fill"], name);
    if (node["dtype"]) in.dtype = parse_input_dtype(path, node["dtype"], name);
    if (node["range"]) {
      if (!is_integer(in.dtype)) {
        fail(path, node["range"].Mark(),
             "input '" + name + "' has a range but is " + to_string(in.dtype) +
                 "; a range is for integer dtypes (int64, int32, int16, int8, uint8)");
      }
      parse_range(path, node["range"], in);
    }
  } else if (name == "mask") {
    in.fill = InputFill::kMask;
  }
  if (!shape.IsSequence()) {
    fail(path, shape.Mark(),
         "the shape of input '" + name + "' must be a list of sizes, e.g. [512, 768]");
  }
  if (shape.size() > 8) fail(path, shape.Mark(), "input '" + name + "' has more than 8 dimensions");
  for (const auto& d : shape) {
    std::int64_t v = -1;
    try {
      v = d.as<std::int64_t>();
    } catch (const YAML::Exception&) {
      fail(path, d.Mark(),
           "bad size '" + (d.IsScalar() ? d.Scalar() : std::string("?")) +
               "' in the shape of input '" + name + "'");
    }
    if (v < 0 || v > (std::int64_t{1} << 24)) {
      fail(path, d.Mark(),
           "size " + std::to_string(v) + " in the shape of input '" + name +
               "' is out of range (0 .. 16777216)");
    }
    in.shape.push_back(v);
  }
  const std::int64_t numel = checked_numel(path, shape.Mark(), name, in.shape);
  if (numel > (std::int64_t{1} << 31)) {
    fail(path, shape.Mark(),
         "input '" + name + "' has " + std::to_string(numel) +
             " elements, more than the limit of 2^31 (2147483648)");
  }
  if (const std::string why = input_kind_error(in); !why.empty()) fail(path, node.Mark(), why);
  return in;
}

// A graph case's 'params': NAME: integer.
std::map<std::string, std::int64_t> graph_params(const std::string& path, const YAML::Node& params) {
  if (!params.IsMap()) fail(path, params.Mark(), "'params' must be a mapping of NAME: integer");
  std::map<std::string, std::int64_t> out;
  for (const auto& kv : params) {
    const auto name = key_of(path, kv.first);
    try {
      out[name] = kv.second.as<std::int64_t>();
    } catch (const YAML::Exception&) {
      fail(path, kv.second.Mark(),
           "bad value '" + (kv.second.IsScalar() ? kv.second.Scalar() : "?") + "' for param '" +
               name + "' (an integer)");
    }
  }
  return out;
}

// A graph case's 'inputs', one per input of `graph` (defined at `graph_line`), in its order:
// every graph input a Tensor with a shape given, and no shape for an input it lacks.
std::vector<GraphInput> graph_inputs(const std::string& path, const YAML::Node& c,
                                     const std::string& graph_name,
                                     const torch::jit::Graph& graph, int graph_line) {
  const YAML::Node inputs = c["inputs"];
  if (!inputs || !inputs.IsMap()) {
    fail(path, inputs ? inputs.Mark() : c.Mark(),
         "a graph case needs 'inputs': a mapping of input name to shape");
  }
  std::vector<GraphInput> out;
  std::vector<std::string> graph_inputs;
  for (const torch::jit::Value* v : graph.inputs()) graph_inputs.push_back(v->debugName());
  for (const auto& kv : inputs) {
    const auto name = key_of(path, kv.first);
    if (std::find(graph_inputs.begin(), graph_inputs.end(), name) == graph_inputs.end()) {
      fail(path, kv.first.Mark(),
           "graph '" + graph_name + "' has no input '" + name +
               "' (its inputs: " + join(graph_inputs) + ")");
    }
  }
  for (const torch::jit::Value* v : graph.inputs()) {
    const std::string name = v->debugName();
    if (v->type()->kind() != c10::TypeKind::TensorType) {
      fail_at_line(path, graph_line,
                   "graph '" + graph_name + "': input %" + name + " is a " + v->type()->str() +
                       "; graph inputs must be Tensors");
    }
    const YAML::Node shape = inputs[name];
    if (!shape)
      fail(path, inputs.Mark(), "missing input '" + name + "' of graph '" + graph_name + "'");
    out.push_back(graph_input(path, name, shape));
    if (out.back().value) {
      fail(path, shape.Mark(),
           "input '" + name + "' of graph '" + graph_name +
               "' is a Tensor: give it a shape, e.g. [512, 768], not a value");
    }
  }
  return out;
}

// A graph or module case's optional 'dtype', 'tag', 'rtol' and 'atol'.
void read_graph_case_options(const std::string& path, const YAML::Node& c, SuiteCase& sc) {
  if (c["dtype"]) sc.dtype = scalar<std::string>(path, c, "dtype", "case");
  if (sc.dtype != "float32") {
    fail(path, c["dtype"].Mark(),
         "dtype '" + sc.dtype + "' is not supported for graph cases (float32 only)");
  }
  if (c["tag"]) sc.tag = scalar<std::string>(path, c, "tag", "case");
  for (const char* key : {"rtol", "atol"}) {
    if (!c[key]) continue;
    const double v = scalar<double>(path, c, key, "case");
    if (!(v >= 0.0 && v < 1.0)) fail(path, c[key].Mark(), std::string(key) + " must be in [0, 1)");
    (key[0] == 'r' ? sc.rtol : sc.atol) = v;
  }
}

// The file of a `models:` entry: as given when absolute, else beside the suite file, else in
// model_search_path().
std::string resolve_model_file(const std::string& path, const YAML::Node& node,
                               const std::string& name, const std::string& file) {
  std::error_code ec;
  if (fs::path(file).is_absolute()) {
    if (fs::is_regular_file(file, ec)) return file;
    fail(path, node.Mark(), "model '" + name + "': file '" + file + "' does not exist");
  }
  std::vector<std::string> dirs{fs::path(path).parent_path().string()};
  for (const std::string& d : model_search_path()) dirs.push_back(d);
  std::string searched;
  for (const std::string& d : dirs) {
    const fs::path candidate = fs::path(d.empty() ? "." : d) / file;
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
    searched += (searched.empty() ? "" : ", ") + (d.empty() ? std::string(".") : d);
  }
  fail(path, node.Mark(),
       "model '" + name + "': no file '" + file + "' in " + searched +
           " (scripts/make-models.py writes the models suite's files; the build runs it)");
}

std::map<std::string, std::string> load_models(const std::string& path, const YAML::Node& models) {
  if (!models.IsMap()) fail(path, models.Mark(), "'models' must be a mapping of name: file");
  std::map<std::string, std::string> out;
  for (const auto& kv : models) {
    const std::string name = key_of(path, kv.first);
    if (!is_identifier(name)) {
      fail(path, kv.first.Mark(), "model name '" + name + "' may only hold letters, digits and _");
    }
    if (!kv.second.IsScalar() || kv.second.Scalar().empty()) {
      fail(path, kv.second.Mark(), "model '" + name + "' must name a TorchScript file");
    }
    out[name] = resolve_model_file(path, kv.second, name, kv.second.Scalar());
  }
  return out;
}

// A graph or module case with its line and name, which it must have.
SuiteCase named_case(const std::string& path, const YAML::Node& c, const std::string& kind) {
  SuiteCase sc;
  sc.line = c.Mark().line + 1;
  if (!c["name"]) fail(path, c.Mark(), "a " + kind + " case needs a 'name'");
  sc.name = scalar<std::string>(path, c, "name", "case");
  return sc;
}

// The entry of the suite's `section` (graphs, models) that the case's `key` names.
template <class Map>
typename Map::const_iterator named_entry(const std::string& path, const YAML::Node& c,
                                         const char* key, const std::string& kind,
                                         const std::string& section, const Map& entries,
                                         const std::string& name) {
  const auto it = entries.find(name);
  if (it != entries.end()) return it;
  std::vector<std::string> names;
  for (const auto& kv : entries) names.push_back(kv.first);
  fail(path, c[key].Mark(),
       "unknown " + kind + " '" + name + "' (" +
           (names.empty() ? "the suite has no '" + section + "'"
                          : "the suite's " + section + ": " + join(names)) +
           ")");
}

SuiteCase module_case(const std::string& path, const Suite& suite, const YAML::Node& c) {
  check_keys(path, c, {"name", "module", "inputs", "dtype", "tag", "rtol", "atol"},
             "a module case");
  SuiteCase sc = named_case(path, c, "module");
  sc.graph = scalar<std::string>(path, c, "module", "case");
  sc.module_file = named_entry(path, c, "module", "model", "models", suite.models, sc.graph)->second;
  const YAML::Node inputs = c["inputs"];
  if (!inputs || !inputs.IsMap()) {
    fail(path, inputs ? inputs.Mark() : c.Mark(),
         "a module case needs 'inputs': a mapping of forward's argument names to shapes");
  }
  for (const auto& kv : inputs) sc.inputs.push_back(graph_input(path, key_of(path, kv.first), kv.second));
  read_graph_case_options(path, c, sc);
  return sc;
}

SuiteCase graph_case(const std::string& path, const Suite& suite, const YAML::Node& c,
                     const SuiteLimits& limits) {
  check_keys(path, c, {"name", "graph", "inputs", "params", "dtype", "tag", "rtol", "atol"},
             "a graph case");
  SuiteCase sc = named_case(path, c, "graph");
  sc.graph = scalar<std::string>(path, c, "graph", "case");
  const auto tmpl = named_entry(path, c, "graph", "graph", "graphs", suite.graphs, sc.graph);
  if (const YAML::Node params = c["params"]) sc.params = graph_params(path, params);
  sc.ir = instantiate(path, c, sc.graph, tmpl->second, sc.params);

  std::shared_ptr<torch::jit::Graph> graph;
  try {
    graph = runtime::parse_ir(sc.ir);
  } catch (const ValueError& e) {
    fail(path, c["graph"].Mark(),
         "graph '" + sc.graph + "' (line " + std::to_string(tmpl->second.line) + "): " +
             e.what());
  }

  const auto nodes = static_cast<std::int64_t>(detail::count_graph_nodes(*graph));
  if (nodes > limits.graph_nodes) {
    fail(path, c["graph"].Mark(),
         "graph '" + sc.graph + "' (line " + std::to_string(tmpl->second.line) + ") has " +
             std::to_string(nodes) + " nodes, more than the limit of " +
             std::to_string(limits.graph_nodes) +
             " (libtorch's interpreter, the reference, builds its code recursively per node)");
  }
  sc.inputs = graph_inputs(path, c, sc.graph, *graph, tmpl->second.line);
  read_graph_case_options(path, c, sc);
  return sc;
}

fs::path executable_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

bool looks_like_path(const std::string& s) {
  return s.find('/') != std::string::npos ||
         (s.size() > 5 && s.compare(s.size() - 5, 5, ".yaml") == 0);
}

}  // namespace

const char* to_string(InputFill fill) noexcept {
  switch (fill) {
    case InputFill::kRandn:
      return "randn";
    case InputFill::kMask:
      return "mask";
    case InputFill::kCausal:
      return "causal";
  }
  return "?";
}

const InputDtype kInputDtypes[10] = {
    InputDtype::kFloat32, InputDtype::kInt64,    InputDtype::kInt32, InputDtype::kBool,
    InputDtype::kFloat64, InputDtype::kFloat16,  InputDtype::kBFloat16,
    InputDtype::kInt16,   InputDtype::kInt8,     InputDtype::kUInt8};

const char* to_string(InputDtype dtype) noexcept {
  switch (dtype) {
    case InputDtype::kFloat32:
      return "float32";
    case InputDtype::kInt64:
      return "int64";
    case InputDtype::kInt32:
      return "int32";
    case InputDtype::kBool:
      return "bool";
    case InputDtype::kFloat64:
      return "float64";
    case InputDtype::kFloat16:
      return "float16";
    case InputDtype::kBFloat16:
      return "bfloat16";
    case InputDtype::kInt16:
      return "int16";
    case InputDtype::kInt8:
      return "int8";
    case InputDtype::kUInt8:
      return "uint8";
  }
  return "?";
}

std::size_t element_bytes(InputDtype dtype) noexcept {
  switch (dtype) {
    case InputDtype::kInt64:
    case InputDtype::kFloat64:
      return 8;
    case InputDtype::kFloat32:
    case InputDtype::kInt32:
      return 4;
    case InputDtype::kFloat16:
    case InputDtype::kBFloat16:
    case InputDtype::kInt16:
      return 2;
    case InputDtype::kBool:
    case InputDtype::kInt8:
    case InputDtype::kUInt8:
      break;
  }
  return 1;
}

bool is_integer(InputDtype dtype) noexcept {
  return dtype == InputDtype::kInt64 || dtype == InputDtype::kInt32 ||
         dtype == InputDtype::kInt16 || dtype == InputDtype::kInt8 || dtype == InputDtype::kUInt8;
}

bool is_floating(InputDtype dtype) noexcept {
  return dtype == InputDtype::kFloat32 || dtype == InputDtype::kFloat64 ||
         dtype == InputDtype::kFloat16 || dtype == InputDtype::kBFloat16;
}

std::string to_string(const InputValue& v) {
  switch (v.kind) {
    case InputValue::Kind::kNone:
      return "None";
    case InputValue::Kind::kInt:
      return std::to_string(v.i);
    case InputValue::Kind::kFloat:
      return fmt::format("{}", v.f);
    case InputValue::Kind::kBool:
      return v.b ? "True" : "False";
  }
  return "?";
}

std::optional<InputValue> parse_input_value(const std::string& text) {
  InputValue v;
  if (text == "none" || text == "None" || text == "null" || text == "~") return v;
  if (text == "true" || text == "True" || text == "false" || text == "False") {
    v.kind = InputValue::Kind::kBool;
    v.b = text[0] == 't' || text[0] == 'T';
    return v;
  }
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (const auto r = std::from_chars(first, last, v.i); r.ec == std::errc() && r.ptr == last) {
    v.kind = InputValue::Kind::kInt;
    return v;
  }
  if (const auto r = std::from_chars(first, last, v.f);
      r.ec == std::errc() && r.ptr == last && std::isfinite(v.f)) {
    v.kind = InputValue::Kind::kFloat;
    return v;
  }
  return std::nullopt;
}

std::string input_kind_error(const GraphInput& in) {
  if (in.value) return "";
  const bool integers = is_integer(in.dtype);
  if (in.fill != InputFill::kRandn && !is_floating(in.dtype)) {
    return "input '" + in.name + "' is " + to_string(in.dtype) + ", but fill '" +
           to_string(in.fill) + "' makes floating-point values";
  }
  if (in.fill == InputFill::kCausal && in.shape.size() < 2) {
    return "input '" + in.name + "' with fill: causal needs at least 2 dimensions";
  }
  if (integers && in.low >= in.high) {
    return "the range of input '" + in.name + "' is empty: " + std::to_string(in.low) + " .. " +
           std::to_string(in.high) + " (values are drawn from LOW to HIGH - 1)";
  }
  if (integers && in.dtype != InputDtype::kInt64) {
    const int bits = static_cast<int>(element_bytes(in.dtype)) * 8;
    const bool is_unsigned = in.dtype == InputDtype::kUInt8;
    const std::int64_t lowest = is_unsigned ? 0 : -(std::int64_t{1} << (bits - 1));
    const std::int64_t highest = (std::int64_t{1} << (is_unsigned ? bits : bits - 1)) - 1;
    if (in.low < lowest || in.high - 1 > highest) {
      return "the range of input '" + in.name + "' does not fit " + to_string(in.dtype);
    }
  }
  return "";
}

std::uint64_t case_tensor_bytes(const SuiteCase& c) {
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t elements = 0;
  const auto add = [&](std::uint64_t n) { elements = n > kMax - elements ? kMax : elements + n; };
  const auto product = [](const std::vector<std::int64_t>& dims) {
    std::uint64_t n = 1;
    for (const std::int64_t d : dims) {
      if (d <= 0) return std::uint64_t{0};
      if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n)) return kMax;
    }
    return n;
  };
  if (c.is_graph()) {
    // In floats' worth (an int64 element counts two, a bool a quarter, rounded up).
    for_each_input_leaf(c.inputs, [&](const GraphInput& in) {
      if (in.value) return;
      const std::uint64_t n = product(in.shape);
      const std::uint64_t bytes = n > kMax / 8 ? kMax : n * element_bytes(in.dtype);
      add(bytes / sizeof(float) + (bytes % sizeof(float) != 0 ? 1 : 0));
    });
  } else {
    add(product({c.m, c.k}));
    add(product({c.k, c.n}));
    if (c.op == "aten::addmm") add(product({c.n}));
    add(product({c.m, c.n}));  // ka's output
    add(product({c.m, c.n}));  // libtorch's
  }
  return elements > kMax / sizeof(float) ? kMax : elements * sizeof(float);
}

namespace {
#ifdef KA_SOURCE_SUITES_DIR
constexpr const char* kSourceSuitesDir = KA_SOURCE_SUITES_DIR;
#else
constexpr const char* kSourceSuitesDir = nullptr;
#endif
#ifdef KA_BUILD_MODELS_DIR
constexpr const char* kBuildModelsDir = KA_BUILD_MODELS_DIR;
#else
constexpr const char* kBuildModelsDir = nullptr;
#endif

// Folders to look in, in order: the environment variable `env`'s, `built_in` (a folder of this
// build, compiled in; null where there is none), and <executable>/../share/ka/<share_dir>.
std::vector<std::string> search_path(const char* env, const char* built_in,
                                     const char* share_dir) {
  std::vector<std::string> dirs;
  if (const char* value = std::getenv(env); value != nullptr && *value != '\0') {
    dirs.emplace_back(value);
  }
  if (built_in != nullptr) dirs.emplace_back(built_in);
  const fs::path exe_dir = executable_dir();
  if (!exe_dir.empty()) dirs.push_back((exe_dir.parent_path() / "share" / "ka" / share_dir).string());
  return dirs;
}
}  // namespace

std::vector<std::string> suite_search_path(const std::string& explicit_dir) {
  std::vector<std::string> dirs;
  if (!explicit_dir.empty()) dirs.push_back(explicit_dir);
  for (std::string& d : search_path("KA_SUITES_DIR", kSourceSuitesDir, "suites")) {
    dirs.push_back(std::move(d));
  }
  return dirs;
}

std::vector<std::string> model_search_path() {
  return search_path("KA_MODELS_DIR", kBuildModelsDir, "models");
}

namespace {

// The integer range of --input's LOW..HIGH.
void parse_command_line_range(const std::string& arg, const std::string& text, GraphInput& in) {
  const std::size_t dots = text.find("..");
  bool ok = dots != std::string::npos && dots > 0 && dots + 2 < text.size();
  if (ok) {
    try {
      std::size_t used_low = 0;
      std::size_t used_high = 0;
      in.low = std::stoll(text.substr(0, dots), &used_low);
      in.high = std::stoll(text.substr(dots + 2), &used_high);
      ok = used_low == dots && used_high == text.size() - dots - 2;
    } catch (const std::exception&) {
      ok = false;
    }
  }
  KA_CHECK(ok, "--input '", arg, "': the range must be LOW..HIGH (values LOW to HIGH - 1), e.g. ",
           "ids:1x128:int64:0..30522");
}

// --input NAME:SHAPE[:KIND[:LOW..HIGH]]: KIND a dtype (float32, int64, int32, bool) or a fill of
// float32 values (randn, mask, causal); LOW..HIGH an integer input's range. Or --input
// NAME=VALUE, a value (an int, a float, true, false, none).
GraphInput command_line_input(const std::string& arg) {
  const std::size_t equals = arg.find('=');
  if (equals != std::string::npos && arg.find(':') > equals) {
    GraphInput in;
    in.name = arg.substr(0, equals);
    const std::optional<InputValue> v = parse_input_value(arg.substr(equals + 1));
    KA_CHECK(!in.name.empty() && v.has_value(), "--input '", arg,
             "' must be NAME=VALUE with VALUE an int, a float, true, false or none, e.g. ",
             "mask=none or n=3");
    in.value = *v;
    return in;
  }
  std::vector<std::string> parts;
  for (std::size_t start = 0;;) {
    const std::size_t colon = arg.find(':', start);
    parts.push_back(arg.substr(start, colon == std::string::npos ? colon : colon - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  KA_CHECK(parts.size() >= 2 && parts.size() <= 4 && !parts[0].empty(), "--input '", arg,
           "' must be NAME:SHAPE[:KIND[:LOW..HIGH]], e.g. x:1x128x768 or ",
           "ids:1x128:int64:0..30522, or NAME=VALUE, e.g. n=3");
  std::string dims = parts[1];
  KA_CHECK(!dims.empty() && dims.find_first_not_of("0123456789x,") == std::string::npos,
           "--input '", arg, "': the shape must be sizes separated by x, e.g. 1x128x768");
  std::replace(dims.begin(), dims.end(), 'x', ',');
  GraphInput in = graph_input("--input " + arg, parts[0], YAML::Load("[" + dims + "]"));
  if (parts.size() >= 3) {
    const std::string& kind = parts[2];
    in.fill = InputFill::kRandn;
    if (const auto dtype = input_dtype_named(kind)) {
      in.dtype = *dtype;
    } else if (kind == to_string(InputFill::kMask)) {
      in.fill = InputFill::kMask;
    } else if (kind == to_string(InputFill::kCausal)) {
      in.fill = InputFill::kCausal;
    } else {
      KA_CHECK(kind == to_string(InputFill::kRandn), "--input '", arg, "': unknown kind '", kind,
               "' (a dtype: ", input_dtype_names(),
               "; or a fill of float32 values: randn, mask, causal)");
    }
  }
  if (parts.size() == 4) {
    KA_CHECK(is_integer(in.dtype), "--input '", arg,
             "': a range is for integer inputs (int64, int32, int16, int8, uint8)");
    parse_command_line_range(arg, parts[3], in);
  }
  if (const std::string why = input_kind_error(in); !why.empty()) {
    KA_THROW(ValueError, "--input '", arg, "': ", why);
  }
  return in;
}

}  // namespace

Suite model_suite(const std::string& file, const std::vector<std::string>& inputs) {
  const std::shared_ptr<const detail::LoadedModel> model = detail::load_model(file);
  Suite suite;
  suite.name = "model";
  suite.path = file;
  suite.description = "ka-bench --model " + file;
  const std::string name = fs::path(file).stem().string();
  suite.models[name] = file;
  SuiteCase sc;
  sc.name = name;
  sc.graph = name;
  sc.module_file = file;
  sc.model = file;
  sc.tag = "model";
  for (const std::string& arg : inputs) {
    GraphInput in = command_line_input(arg);
    KA_CHECK(std::none_of(sc.inputs.begin(), sc.inputs.end(),
                          [&](const GraphInput& g) { return g.name == in.name; }),
             "--input '", in.name, "' is given twice");
    sc.inputs.push_back(std::move(in));
  }
  detail::check_module_inputs(*model, sc);
  detail::check_module_runs(*model, sc);
  suite.cases.push_back(std::move(sc));
  return suite;
}

std::vector<std::string> list_suites(const std::string& explicit_dir) {
  std::set<std::string> names;
  for (const auto& dir : suite_search_path(explicit_dir)) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (entry.path().extension() == ".yaml") names.insert(entry.path().stem().string());
    }
  }
  return {names.begin(), names.end()};
}

std::string find_suite_file(const std::string& name_or_path, const std::string& explicit_dir) {
  if (looks_like_path(name_or_path)) {
    KA_CHECK(fs::is_regular_file(name_or_path), "suite file '", name_or_path, "' does not exist");
    return name_or_path;
  }
  const auto dirs = suite_search_path(explicit_dir);
  for (const auto& dir : dirs) {
    const fs::path candidate = fs::path(dir) / (name_or_path + ".yaml");
    if (fs::is_regular_file(candidate)) return candidate.string();
  }
  std::string searched;
  for (const auto& d : dirs) searched += (searched.empty() ? "" : ", ") + d;
  std::string known;
  for (const auto& s : list_suites(explicit_dir)) known += (known.empty() ? "" : ", ") + s;
  KA_THROW(ValueError, "unknown suite '", name_or_path, "' (searched: ", searched,
           "; available: ", known.empty() ? "none" : known, ")");
}

namespace {

// An op case (aten::mm / aten::addmm with M, K, N) of suite file `path`.
SuiteCase op_case(const std::string& path, const YAML::Node& c) {
  check_keys(path, c, {"name", "op", "M", "K", "N", "dtype", "tag", "alpha", "beta"}, "a case");
  SuiteCase sc;
  sc.line = c.Mark().line + 1;
  if (!c["op"]) fail(path, c.Mark(), "case has no 'op' (or 'graph')");
  sc.op = scalar<std::string>(path, c, "op", "case");
  if (sc.op != "aten::mm" && sc.op != "aten::addmm") {
    fail(path, c["op"].Mark(), "unsupported op '" + sc.op + "' (this suite runner knows aten::mm and aten::addmm)");
  }
  sc.m = dimension(path, c, "M");
  sc.k = dimension(path, c, "K");
  sc.n = dimension(path, c, "N");
  if (c["dtype"]) sc.dtype = scalar<std::string>(path, c, "dtype", "case");
  try {
    if (parse_dtype(sc.dtype) != DType::kFloat32) {
      fail(path, c["dtype"].Mark(), "dtype '" + sc.dtype + "' is not supported yet (float32 only)");
    }
  } catch (const ValueError& e) {
    if (std::string(e.what()).rfind(path, 0) == 0) throw;
    fail(path, c["dtype"].Mark(), e.what());
  }
  if (c["tag"]) sc.tag = scalar<std::string>(path, c, "tag", "case");
  if (c["alpha"]) sc.alpha = scalar<double>(path, c, "alpha", "case");
  if (c["beta"]) sc.beta = scalar<double>(path, c, "beta", "case");
  const std::string short_op = sc.op.substr(sc.op.find("::") + 2);
  sc.name = c["name"] ? scalar<std::string>(path, c, "name", "case")
                      : short_op + "_" + std::to_string(sc.m) + "x" + std::to_string(sc.k) +
                            "x" + std::to_string(sc.n);
  return sc;
}

// Appends `sc` to `suite` after checking its name: letters, digits, _ - . and not in `seen`.
void add_checked_case(const std::string& file, const YAML::Node& c, SuiteCase sc,
                      const SuiteLimits& limits, bool limits_are_default,
                      std::unordered_set<std::string>& seen, Suite& suite) {
  const bool name_ok =
      !sc.name.empty() && std::all_of(sc.name.begin(), sc.name.end(), [](char ch) {
        return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' ||
               ch == '.';
      });
  if (!name_ok) {
    fail(file, c.Mark(), "case name '" + sc.name + "' may only hold letters, digits, _ - .");
  }
  if (!seen.insert(sc.name).second) {
    fail(file, c.Mark(), "duplicate case name '" + sc.name + "'");
  }
  const std::uint64_t bytes = case_tensor_bytes(sc);
  if (bytes > limits.case_bytes) {
    fail(file, c.Mark(),
         "case '" + sc.name + "' needs " + format_bytes(bytes) +
             " of tensors, more than the limit of " + format_bytes(limits.case_bytes) +
             (limits_are_default ? " (three quarters of the memory available now)" : ""));
  }
  suite.cases.push_back(std::move(sc));
}
}  // namespace

Suite load_suite_file(const std::string& path, SuiteLimits limits) {
  const bool limits_are_default = limits.case_bytes == 0;
  if (limits_are_default) limits.case_bytes = memory_limit_bytes();
  std::ifstream in(path);
  KA_CHECK(in.good(), "cannot read suite file '", path, "'");
  YAML::Node root;
  try {
    root = YAML::Load(in);
  } catch (const YAML::ParserException& e) {
    fail(path, e.mark, "YAML syntax error: " + e.msg);
  }
  if (!root || !root.IsMap()) {
    KA_THROW(ValueError, path, ":1: a suite file must be a mapping with 'suite' and 'groups'");
  }
  check_keys(path, root, {"suite", "description", "graphs", "models", "groups"}, "the suite");
  Suite suite;
  suite.path = path;
  suite.name = scalar<std::string>(path, root, "suite", "the suite");
  if (root["description"]) suite.description = scalar<std::string>(path, root, "description", "the suite");
  if (root["graphs"]) suite.graphs = load_graphs(path, root["graphs"]);
  if (root["models"]) suite.models = load_models(path, root["models"]);
  const YAML::Node groups = root["groups"];
  if (!groups || !groups.IsSequence() || groups.size() == 0) {
    fail(path, groups ? groups.Mark() : root.Mark(), "'groups' must be a non-empty list");
  }
  std::unordered_set<std::string> seen;
  const auto add_case = [&](const YAML::Node& c, SuiteCase sc) {
    add_checked_case(path, c, std::move(sc), limits, limits_are_default, seen, suite);
  };
  for (const auto& group : groups) {
    if (!group.IsMap()) fail(path, group.Mark(), "each group must be a mapping with 'model' and 'cases'");
    check_keys(path, group, {"model", "source", "cases"}, "a group");
    const auto model = scalar<std::string>(path, group, "model", "group");
    const YAML::Node cases = group["cases"];
    if (!cases || !cases.IsSequence() || cases.size() == 0) {
      fail(path, cases ? cases.Mark() : group.Mark(), "group '" + model + "' needs a non-empty 'cases' list");
    }
    for (const auto& c : cases) {
      if (!c.IsMap()) fail(path, c.Mark(), "each case must be a mapping");
      if (c["module"]) {
        SuiteCase sc = module_case(path, suite, c);
        sc.model = model;
        add_case(c, std::move(sc));
        continue;
      }
      if (c["graph"]) {
        SuiteCase sc = graph_case(path, suite, c, limits);
        sc.model = model;
        add_case(c, std::move(sc));
        continue;
      }
      SuiteCase sc = op_case(path, c);
      sc.model = model;
      add_case(c, std::move(sc));
    }
  }
  return suite;
}

namespace detail {

std::size_t count_graph_nodes(const torch::jit::Graph& graph) {
  std::size_t n = 0;
  std::vector<const torch::jit::Block*> blocks{graph.block()};
  while (!blocks.empty()) {
    const torch::jit::Block* b = blocks.back();
    blocks.pop_back();
    for (const torch::jit::Node* node : b->nodes()) {
      ++n;
      for (const torch::jit::Block* inner : node->blocks()) blocks.push_back(inner);
    }
  }
  return n;
}

}  // namespace detail
}  // namespace ka::harness
