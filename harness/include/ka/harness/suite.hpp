// Suites: YAML files of operator cases drawn from real models (suites/*.yaml).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ka::harness {

/// How a graph case's input tensor is filled (seeded per case).
enum class InputFill {
  kRandn,   ///< Standard normal.
  kMask,    ///< Additive attention mask: 0 or -1e4 (one element in five masked), at random.
  kCausal,  ///< Additive causal mask: -1e4 above the diagonal of the last two dims, else 0.
};
/// "randn", "mask", "causal".
const char* to_string(InputFill fill) noexcept;

/// The element type of a graph case's input tensor: fp32 activations, or integers (token ids,
/// positions, an attention mask of 0/1) and booleans as real models take them, or the other
/// float and integer types a model may be saved in (ka's kernels take float32; the rest runs
/// libtorch's).
enum class InputDtype {
  kFloat32, kInt64, kInt32, kBool, kFloat64, kFloat16, kBFloat16, kInt16, kInt8, kUInt8
};
/// Every InputDtype, in the order help texts list them.
extern const InputDtype kInputDtypes[10];
/// "float32", "int64", "int32", "bool", "float64", "float16", "bfloat16", "int16", "int8",
/// "uint8".
const char* to_string(InputDtype dtype) noexcept;
/// Bytes per element.
std::size_t element_bytes(InputDtype dtype) noexcept;
/// Integer dtypes draw from a range [LOW, HIGH); floating ones from randn or a fill.
bool is_integer(InputDtype dtype) noexcept;
bool is_floating(InputDtype dtype) noexcept;

/// A non-tensor argument of a model's forward: None, an int, a float or a bool (an optional
/// mask left out, a sequence length, a flag).
struct InputValue {
  enum class Kind : std::uint8_t { kNone, kInt, kFloat, kBool };
  Kind kind = Kind::kNone;
  std::int64_t i = 0;
  double f = 0.0;
  bool b = false;
};
/// As Python writes it: "None", "3", "0.5", "True".
std::string to_string(const InputValue& v);
/// "none" (or "None", "null", "~"), "true"/"false" (or "True"/"False"), an integer, a float;
/// nullopt for anything else.
std::optional<InputValue> parse_input_value(const std::string& text);

/// What holds a graph input's items: nothing (a tensor or a value), a Tuple or a List.
enum class InputContainer { kNone, kTuple, kList };

/// One input of a graph case: a tensor, a value (`value` set), or a Tuple or List of inputs
/// (`container` and `items` set).
struct GraphInput {
  std::string name;  ///< The graph input's name, without '%'.
  std::vector<std::int64_t> shape;
  InputFill fill = InputFill::kRandn;  ///< float32 only
  InputDtype dtype = InputDtype::kFloat32;
  /// Integer inputs: values uniform in [low, high) (token ids: [0, the vocabulary's size));
  /// booleans are 0 or 1.
  std::int64_t low = 0;
  std::int64_t high = 2;
  /// Set: the input is this value, not a tensor (shape, fill, dtype and range unused).
  std::optional<InputValue> value = std::nullopt;
  /// Not kNone: the input is a Tuple or List of `items`, given as NAME.0, NAME.1, ... (items
  /// of items as NAME.0.0, ...); set by check_module_inputs from forward's argument types.
  InputContainer container = InputContainer::kNone;
  std::vector<GraphInput> items = {};
};

/// `fn(leaf)` for every tensor or value input of `inputs`, a container's items in order.
template <typename Fn>
void for_each_input_leaf(const std::vector<GraphInput>& inputs, Fn&& fn) {
  for (const GraphInput& in : inputs) {
    if (in.container == InputContainer::kNone) {
      fn(in);
    } else {
      for_each_input_leaf(in.items, fn);
    }
  }
}

/// Why `in`'s dtype, fill, range and shape do not go together (a mask fill of an int64 input,
/// an empty range, a causal mask of one dimension), or empty when they do.
std::string input_kind_error(const GraphInput& in);

/// One benchmark case: an operator at one shape (`op`), or a TorchScript graph at one set of
/// input shapes (`graph`, see Note [Suite file format] in suite.cpp).
struct SuiteCase {
  std::string name;   ///< Unique within the suite; part of the benchmark name.
  std::string op;     ///< Exact overload name: aten::mm or aten::addmm; empty for graph cases.
  std::int64_t m = 0;
  std::int64_t k = 0;
  std::int64_t n = 0;
  std::string dtype = "float32";
  std::string tag;    ///< Free-form grouping (square, decode, prefill, ...).
  std::string model;  ///< The model the shape comes from, as named in the suite file.
  double alpha = 1.0;
  double beta = 1.0;
  int line = 0;       ///< Line in the suite file, for error messages.

  // Graph cases only (a module case is a graph case too).
  std::string graph;                           ///< Name of the suite's graph template or model.
  /// Module cases: the TorchScript file (resolved) of the suite's `models:` entry `graph`,
  /// whose frozen forward is the graph.
  std::string module_file;
  std::string ir;                              ///< TorchScript IR with the params substituted.
  std::vector<GraphInput> inputs;              ///< In the graph's input order.
  std::map<std::string, std::int64_t> params;  ///< Values of the template's ${NAME}s.
  double rtol = 1e-4;  ///< Correctness: |ka - ref| <= atol * rms(ref) + rtol * |ref|.
  double atol = 1e-4;  ///< Relative to the root mean square of the reference output.

  [[nodiscard]] bool is_graph() const noexcept { return !graph.empty(); }
  [[nodiscard]] bool is_module() const noexcept { return !module_file.empty(); }
};

/// A TorchScript IR template of a suite's `graphs:` map.
struct GraphTemplate {
  std::string ir;  ///< With ${NAME} placeholders.
  int line = 0;    ///< Where it is defined in the suite file.
};

/// A loaded suite.
struct Suite {
  std::string name;
  std::string description;
  std::string path;
  std::map<std::string, GraphTemplate> graphs;
  std::map<std::string, std::string> models;  ///< `models:`: name → TorchScript file (resolved).
  std::vector<SuiteCase> cases;
};

/// Where suites are looked up by name, in order: `explicit_dir` if non-empty, $KA_SUITES_DIR,
/// the source tree's suites/ (compiled in), and <executable>/../share/ka/suites.
std::vector<std::string> suite_search_path(const std::string& explicit_dir);

/// Finds the file of suite `name_or_path` (a path when it contains '/' or ends in .yaml).
/// Throws ka::ValueError listing the searched folders and the suites found there.
std::string find_suite_file(const std::string& name_or_path, const std::string& explicit_dir);

/// Names of the suites in the search path (files *.yaml), sorted, without duplicates.
std::vector<std::string> list_suites(const std::string& explicit_dir);

/// Where a suite's model files are looked up when not found beside the suite file, in order:
/// $KA_MODELS_DIR, the build's models/ (compiled in; scripts/make-models.py writes them), and
/// <executable>/../share/ka/models.
std::vector<std::string> model_search_path();
/// A suite of one module case (ka-bench --model FILE --input NAME:SHAPE ...): loads the
/// module to check that `inputs` ("x:1x128x768", "n=3") give each argument of its forward a
/// shape or a value once (or leave it to forward's default). Throws ka::ValueError naming the
/// file, input or shape.
Suite model_suite(const std::string& file, const std::vector<std::string>& inputs);
/// Most nodes a graph case's graph may hold (see Note [Graph node limit] in suite.cpp):
/// libtorch's interpreter, ka-bench's reference, builds its code recursively per node.
constexpr std::int64_t kMaxGraphNodes = 200000;

/// What a suite file may ask for before anything is allocated.
struct SuiteLimits {
  /// Most bytes of tensors one case may need (inputs, and for op cases ka's and libtorch's
  /// outputs); 0: ka::memory_limit_bytes() (ka/core/memory_limit.hpp).
  std::uint64_t case_bytes = 0;
  /// Most nodes of one graph case's graph, nested blocks included.
  std::int64_t graph_nodes = kMaxGraphNodes;
};

/// Bytes of the fp32 tensors case `c` allocates before it runs: A, B (and the bias of
/// aten::addmm) and two M x N outputs for op cases, the inputs for graph cases (their outputs
/// depend on the graph). Saturates at UINT64_MAX.
std::uint64_t case_tensor_bytes(const SuiteCase& c);

/// Loads and validates a suite file; graph templates are instantiated and parsed as
/// TorchScript IR. Throws ka::ValueError naming the file and line of the first problem (YAML
/// syntax, unknown key, missing field, bad value, duplicate case name, unknown graph, IR that
/// does not parse, missing or unknown graph input, bad shape, unset or unused param, a shape
/// whose element count overflows int64, a case whose tensors exceed limits.case_bytes, a
/// graph of more than limits.graph_nodes nodes). `limits.case_bytes` 0 means
/// ka::memory_limit_bytes().
Suite load_suite_file(const std::string& path, SuiteLimits limits = {});

}  // namespace ka::harness
