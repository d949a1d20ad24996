// Runtime: ka's pipeline as one object (dispatch → extract → execute), eager and on graphs.
#pragma once

#include <ka/dispatch/kernel_function.hpp>
#include <ka/extractor/extractor.hpp>
#include <ka/runtime/parse_ir.hpp>

#include <ATen/core/ivalue.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace torch::jit {
struct Graph;
struct Code;
}

namespace ka::runtime {

/// Which device runs an op. The policy is the inputs' device (DESIGN.md §1: the
/// SchedulerAgent): an op whose tensors are on cuda:0 runs there, CPU tensors run on the CPU;
/// tensors on different devices are an error naming both.
enum class SchedulePolicy : std::uint8_t { kInputsDevice };
/// "inputs-device".
const char* to_string(SchedulePolicy p) noexcept;

/// A graph run's outputs, in the graph's return order, and how it was executed.
struct GraphResult {
  std::vector<c10::IValue> outputs;
  std::vector<extractor::TaskPlan> tasks;
};

/// ka's runtime: registers ka's kernels into ka's dispatcher (register_aten_ops), offers eager
/// calls by operator name through the dispatcher, and runs TorchScript graphs through the
/// extractor with fusion.
///
///   ka::runtime::Runtime rt;
///   auto out = rt.call("aten::addmm", {bias, a, b, 1, 1});          // eager
///   auto r = rt.run_graph(ir_text, {x, w1, b1, w2, b2});             // fused graph
class Runtime {
 public:
  /// Registers ka's operators. The first Runtime of a process also calls
  /// load_table_from_environment().
  Runtime();

  /// When KA_TUNED_TABLE names a file (a ka database or an `export_sqlite` table), loads it
  /// as load_table() does and returns true; false when the variable is unset or empty.
  bool load_table_from_environment() const;

  /// Loads the rows tuned on this CPU for this build's kernel versions from `path` and makes
  /// them the extractor's table; where a CUDA device is visible, its rows too, as the CUDA
  /// kernels' table (rows of another device or version are skipped and logged). Throws
  /// ka::DbError naming the file.
  void load_table(const std::string& path) const;
  /// Makes `table` (e.g. one compiled in from a generated header) the extractor's table.
  void set_table(db::RecommendationTable table) const;
  /// Makes the rows of a generated header (ka-db export --format header --symbol NS::NAME:
  /// NS::NAME_rows, NS::NAME_size, NS::NAME_device_json) the table of the device they were
  /// tuned on: the CUDA kernels' where that is the visible GPU, else the CPU kernels', whose
  /// rows of another CPU or kernel version are skipped and logged as load_table() does.
  /// Returns how many rows the table kept.
  std::size_t use_compiled_table(const db::CompiledRecommendation* rows, std::size_t count,
                                 std::string_view device_json) const;

  /// Calls `op` (exact overload name, as in the schema: "aten::add.Tensor") with its schema
  /// arguments through ka's dispatcher; returns the results. Throws as the dispatcher and the
  /// extractor do ("Could not run ...", kernel not found, bad dtype or shape).
  dispatch::Stack call(std::string_view op, dispatch::Stack args) const;

  /// Parses TorchScript IR (torch::jit::parseIR) and runs it. `inputs` are the graph's
  /// inputs in order. Nodes ka does not serve run libtorch's own kernels; a graph with control
  /// flow runs in libtorch's interpreter. Throws ka::ValueError for IR that does not parse
  /// (with the parser's message), for inputs that do not match, or when a node fails (naming
  /// it).
  GraphResult run_graph(const std::string& ir, const std::vector<c10::IValue>& inputs,
                        const extractor::GraphOptions& options = {}) const;
  /// Runs a graph object (e.g. a scripted module's forward graph, self included in inputs).
  GraphResult run_graph(torch::jit::Graph& graph, const std::vector<c10::IValue>& inputs,
                        const extractor::GraphOptions& options = {}) const;
  /// Lowers `graph` to ka's OpGraph without running it: constants (tensors too) and lists of
  /// constant ints folded into values, one node per other node, each with libtorch's own
  /// kernel as its fallback (Note [Fallback nodes]).
  /// Throws ka::NotImplementedError for a graph only libtorch's interpreter can run.
  static extractor::OpGraph lower(torch::jit::Graph& graph, const std::vector<c10::IValue>& inputs);
  /// lower(), or nullopt with `why` ("node 4 (prim::If) is control flow ka does not flatten")
  /// for a graph only libtorch's interpreter can run. Control flow that `inputs` settle (an
  /// `if mask is not None` with mask None, a loop over an int argument) is folded first, on a
  /// copy (Note [Control flow settled by the inputs] in settled_graph.cpp).
  static std::optional<extractor::OpGraph> try_lower(torch::jit::Graph& graph,
                                                     const std::vector<c10::IValue>& inputs,
                                                     std::string& why);
  /// Runs a graph lowered once (lower, try_lower) as run_graph runs it after lowering: for a
  /// program that runs one graph on the same inputs many times. Each run overwrites the
  /// values the graph's nodes compute.
  GraphResult run_lowered(extractor::OpGraph& graph,
                          const extractor::GraphOptions& options = {}) const;
  /// A graph ka cannot lower, compiled once for libtorch's interpreter: a program that runs it
  /// many times pays for the compilation once, as libtorch's own method calls do.
  struct InterpretedGraph {
    std::shared_ptr<const torch::jit::Code> code;
    std::size_t nodes = 0;
    std::string why;  ///< why ka cannot lower it (try_lower's reason)
  };
  /// Compiles `graph` (a copy of it) for run_in_interpreter.
  static InterpretedGraph interpret(torch::jit::Graph& graph, std::string why);
  /// Runs a graph in libtorch's interpreter as a whole, for a graph ka cannot lower (`why`:
  /// control flow, an interpreter instruction); one task plan says so.
  static GraphResult run_in_interpreter(const InterpretedGraph& graph,
                                        const std::vector<c10::IValue>& inputs);
  /// interpret() then run_in_interpreter(), for one run.
  static GraphResult run_in_interpreter(torch::jit::Graph& graph,
                                        const std::vector<c10::IValue>& inputs,
                                        const std::string& why);

  [[nodiscard]] SchedulePolicy policy() const noexcept { return SchedulePolicy::kInputsDevice; }
  extractor::Extractor& extractor() const { return extractor::Extractor::global(); }

 private:
  // try_lower's lowering of `graph` as it stands, node by node.
  static std::optional<extractor::OpGraph> lower_straight(torch::jit::Graph& graph,
                                                          const std::vector<c10::IValue>& inputs,
                                                          std::string& why);
};

}  // namespace ka::runtime
