// ExtractorAgent: turns operator calls and graphs of them into KernelTasks and runs them.
#pragma once

#include <ka/core/device.hpp>
#include <ka/db/recommendation_table.hpp>
#include <ka/executor/cpu_executor.hpp>
#include <ka/extractor/fusion.hpp>
#include <ka/extractor/kernel_registry.hpp>

#include <ATen/core/ivalue.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ka::extractor {

/// The states of one extraction (DESIGN.md §5); an error names the state it happened in.
enum class Stage : std::uint8_t { kValidate, kFusion, kLookup, kPack, kConfigure, kSubmit };
/// "validate", "fusion", "lookup", "pack", "configure", "submit".
const char* to_string(Stage stage) noexcept;

namespace detail {
struct OpSpec;
}

/// An operator the extractor serves, resolved once from its exact signature so that eager
/// calls do no string work.
class OpHandle {
 public:
  OpHandle() = default;
  [[nodiscard]] bool valid() const noexcept { return spec_ != nullptr; }
  [[nodiscard]] std::string_view signature() const noexcept;
  [[nodiscard]] const detail::OpSpec* spec() const noexcept { return spec_; }

 private:
  friend class Extractor;
  explicit OpHandle(const detail::OpSpec* spec) : spec_(spec) {}
  const detail::OpSpec* spec_ = nullptr;
};

/// A graph of operator calls over a table of values (TorchScript IR lowered by the runtime):
/// `values` holds the inputs and constants; each node reads values by index and its outputs
/// are written to the indices in `outputs`. Nodes are in topological order.
struct OpGraph {
  /// libtorch's own kernel for a node: called with the node's inputs on a stack, it leaves
  /// the node's outputs there (a boxed call of the node's schema, or the interpreter's
  /// operation for a prim node).
  using Fallback = std::function<void(std::vector<c10::IValue>& stack)>;
  /// What a fallback reads. kMetadata: only sizes, strides and list or tuple structure (a
  /// view, aten::size, list and tuple glue), so it may run before the tasks that write its
  /// inputs' data; kData: the data itself. See Note [Fallback nodes].
  enum class Reads : std::uint8_t { kData, kMetadata };
  struct Node {
    std::string signature;     ///< Exact overload "aten::add.Tensor", or a prim node's kind.
    std::vector<int> inputs;   ///< Schema arguments, as indices into values.
    std::vector<int> outputs;  ///< Where results go.
    /// Runs the node where ka has no kernel for it or its kernel refuses the arguments;
    /// empty when the node must run on ka (graphs built by hand).
    Fallback fallback;
    Reads reads = Reads::kData;
  };
  /// What ka's kernels refused a node for on an earlier run (its arguments' metadata) and
  /// why; kept by the extractor (Note [Refusals remembered]).
  struct Refusal {
    std::vector<std::int64_t> key;
    std::string reason;
  };
  std::vector<c10::IValue> values;
  std::vector<Node> nodes;
  std::vector<int> outputs;  ///< Values the caller reads after the run (kept materialised).
  /// Per value (none past its end): a tensor constant that every run of this graph reads
  /// unchanged, the same tensor each time (a frozen module's weight that no node writes), so
  /// work on its data may be kept across runs (Note [Constant weights packed once]).
  std::vector<bool> run_constants;
  /// Whether a node may write one of its arguments (an in-place or out= op, a node without a
  /// schema). When none does, a value's data is final once the node that makes it has run,
  /// and a fallback that reads only such data runs during extraction (Note [Fallback
  /// nodes]). True unless the graph's maker checked (the runtime does).
  bool writes_arguments = true;
  /// Per node (none past its end): its last refusal, an empty key where it had none. Filled
  /// by the extractor's runs.
  std::vector<Refusal> refusals;
  /// What the nodes' fallbacks were made from, where its maker keeps it alive with the graph
  /// (the runtime's copy of a TorchScript graph specialized on its inputs); may be null.
  std::shared_ptr<const void> source;
};

/// What the constant weights packed once hold and did, process-wide (Note [Constant weights
/// packed once]).
struct PackedWeightsStats {
  std::int64_t packs = 0;        ///< weights packed (first use, or written since)
  std::int64_t reuses = 0;       ///< GEMMs that read a weight an earlier extraction packed
  std::int64_t over_budget = 0;  ///< GEMMs that packed per call, KA_PACKED_WEIGHTS_MIB full
  std::int64_t entries = 0;      ///< packed weights held now
  std::int64_t bytes = 0;        ///< their bytes
  std::int64_t budget_bytes = 0;
};
PackedWeightsStats packed_weights_stats();
/// Drops every packed weight (a task prepared with one keeps it until it is destroyed).
void clear_packed_weights();

/// Fallback task ids have this bit set; the executor's ids never do.
inline constexpr std::uint64_t kFallbackTaskIds = std::uint64_t{1} << 62;

/// Options of one graph extraction.
struct GraphOptions {
  bool fusion = true;  ///< false: every op is its own kernel ("ka unfused").
  /// Fill a fallback's TaskPlan::shape_key with its inputs' shapes ("[1,128,768],int"), for
  /// reports; off by default, as it costs a string per fallback and call.
  bool describe_fallbacks = false;
};

/// One extracted kernel launch as --explain and dump_extraction_context() show it.
struct TaskPlan {
  /// The executor's id of the task, or for a fallback one of kFallbackTaskIds: the id of its
  /// "block" spans, or of its "fallback" span, in the profiler.
  std::uint64_t task_id = 0;
  std::string pattern;     ///< Signature, or fusion pattern "fused::ew_chain[mul+add+gelu]".
  std::vector<int> nodes;  ///< Graph node indices it covers.
  std::string fusion;      ///< Why these nodes fused, or "" for a single op.
  std::string kernel;
  int kernel_version = 0;
  std::string device;
  std::string shape_key;
  std::string config;
  db::Provenance provenance = db::Provenance::kHeuristic;  ///< kFallback: libtorch ran it.
  std::vector<std::uint64_t> dependencies;
  /// Why libtorch's own kernel ran these nodes ("ka has no kernel for aten::split.Tensor");
  /// "" for ka's tasks.
  std::string fallback;
};

/// One call extracted once and runnable many times with a chosen configuration: what the
/// tuner times. The arguments are packed and the output allocated when it is made; run()
/// executes the prepared grid again (same output). On a CUDA device, enqueue() puts the
/// kernel on a stream without waiting (for timing with events); run() enqueues on the
/// default stream and waits. Made by Extractor::prepare_call.
class PreparedCall {
 public:
  ~PreparedCall();
  PreparedCall(const PreparedCall&) = delete;
  PreparedCall& operator=(const PreparedCall&) = delete;

  /// Ok when the kernel accepted the configuration; otherwise why not (nothing to run).
  [[nodiscard]] const Status& status() const noexcept { return status_; }
  [[nodiscard]] const kernels::KernelDescriptor& kernel() const noexcept { return *kernel_; }
  /// The kernel-facing shape key (what tuned rows are stored under, with lookup_op()).
  [[nodiscard]] const ShapeKey& shape_key() const noexcept { return key_; }
  /// The name table rows for this call are stored under (the signature or fusion pattern).
  [[nodiscard]] const std::string& lookup_op() const noexcept { return lookup_op_; }
  /// The complete configuration that runs (grid and block derived for the shape).
  [[nodiscard]] const LaunchConfig& config() const noexcept { return config_; }
  /// The configuration the kernel's heuristic picks for this shape.
  [[nodiscard]] const LaunchConfig& default_config() const noexcept { return default_config_; }
  /// Where the call runs (its arguments' device).
  [[nodiscard]] const Device& device() const noexcept { return device_; }
  /// Runs the call once more and waits for it. Throws ka::ValueError when status() is not
  /// ok, ka::CudaError when a CUDA launch fails.
  void run() const;
  /// CUDA calls: enqueues the kernel on `stream` (a cudaStream_t; null: the legacy default
  /// stream) and returns without waiting. Throws ka::ValueError for a CPU call or when
  /// status() is not ok, ka::CudaError when the launch is refused or fails.
  void enqueue(void* stream) const;
  /// The output the runs write.
  [[nodiscard]] c10::IValue result() const;

 private:
  friend class Extractor;
  PreparedCall();
  struct State;
  std::unique_ptr<State> state_;
  Device device_;
  Status status_ = Status::ok();
  const kernels::KernelDescriptor* kernel_ = nullptr;
  ShapeKey key_;
  std::string lookup_op_;
  LaunchConfig config_;
  LaunchConfig default_config_;
};

/// The ExtractorAgent (DESIGN.md §5): validate → fusion analysis → kernel lookup → argument
/// packing + MemRange analysis → launch configuration → assemble and submit. Kernels come
/// from per-device KernelRegistry objects (ka's built-in kernels are registered by the
/// constructor); configurations come from the RecommendationTable (empty unless set) and
/// fall back to each kernel's heuristic, with the provenance recorded on every task.
///
///   Extractor ex;
///   OpHandle add = ex.resolve("aten::add.Tensor");
///   c10::IValue args[] = {a, b, 1};
///   c10::IValue out = ex.call(add, args, 3);      // eager, runs now
///   auto plans = ex.run_graph(graph);             // fused, on the executor
class Extractor {
 public:
  Extractor();
  ~Extractor();
  Extractor(const Extractor&) = delete;
  Extractor& operator=(const Extractor&) = delete;

  /// The process-wide extractor used by ka's registered kernels.
  static Extractor& global();

  /// The op for an exact signature. Throws ka::NotImplementedError "kernel not found for
  /// <signature> on any device" when ka serves no such op.
  [[nodiscard]] OpHandle resolve(std::string_view signature) const;
  /// Signatures of every op ka can extract, sorted.
  [[nodiscard]] static std::vector<std::string> supported_ops();

  /// Eager call: one op with its schema arguments; runs before returning and returns the
  /// result. Throws ka::ValueError (bad dtype, shapes, devices) or ka::NotImplementedError
  /// (no kernel for the device), each naming the op, signature, device and stage; nothing
  /// runs when extraction fails.
  c10::IValue call(OpHandle op, const c10::IValue* args, std::size_t num_args);
  /// The extraction stage alone, for measuring it: everything call() does (the output is
  /// allocated, the task assembled and its grid prepared) except running the task. The
  /// returned tensor is allocated but not written.
  c10::IValue extract_only(OpHandle op, const c10::IValue* args, std::size_t num_args);
  /// Extracts one CPU call for repeated runs with tunable point `point` (params only; the
  /// kernel completes grid and block for the shape), or with the kernel's default when
  /// `point` is null. Errors as call(); a point the kernel cannot run gives a PreparedCall
  /// whose status() says why.
  std::unique_ptr<PreparedCall> prepare_call(OpHandle op, const c10::IValue* args,
                                             std::size_t num_args, const LaunchConfig* point);

  /// Extracts a whole graph (with fusion unless disabled), submits every task to the CPU
  /// executor (independent tasks overlap), waits, and stores results in graph.values.
  /// Nodes ka does not serve run their fallback (Note [Fallback nodes]). Returns the plan
  /// of every task, fallbacks included, in graph order. Errors as call(); no task runs
  /// unless every node before the first data fallback extracted.
  std::vector<TaskPlan> run_graph(OpGraph& graph, const GraphOptions& options = {});

  /// The recommendation table consulted for configs of `device`'s kernels (an empty one by
  /// default): a table holds one device's fingerprint, so the CPU and a CUDA device each have
  /// their own. Replacing one drops cached configs. Thread-safe with respect to calls.
  void set_table(std::shared_ptr<const db::RecommendationTable> table,
                 DeviceType device = DeviceType::kCPU);
  [[nodiscard]] std::shared_ptr<const db::RecommendationTable> table(
      DeviceType device = DeviceType::kCPU) const;

  /// A configuration and where it came from.
  struct Choice {
    LaunchConfig config;
    db::Provenance provenance = db::Provenance::kHeuristic;
  };
  /// The configuration the pipeline would run `kernel` with for `key` (rows stored under
  /// `lookup_op`): the table's (exact → nearest → arch default, completed for the shape and
  /// checked with can_run) or else the kernel's heuristic. For harnesses that call a kernel
  /// directly but want the pipeline's choice.
  [[nodiscard]] Choice choose_config(const kernels::KernelDescriptor& kernel,
                                     std::string_view lookup_op, const ShapeKey& key) const;

  /// Name → version of every kernel registered on any device (what a loaded table must match).
  [[nodiscard]] db::KernelVersions kernel_versions() const;

  KernelRegistry& registry(DeviceType device);
  [[nodiscard]] const KernelRegistry& registry(DeviceType device) const;
  FusionChecker& fusion_checker() noexcept { return fusion_; }
  executor::CpuExecutor& cpu_executor() noexcept { return *cpu_executor_; }

  /// What this thread's last eager call ran: fills `plan`'s pattern (the op's signature),
  /// kernel, version, device, shape key, config and provenance, reusing its strings, and
  /// returns true; false when that call failed or no eager call has run. Cheaper than
  /// dump_extraction_context(): for callers that log every call (libka_torch's explain).
  bool last_eager_plan(TaskPlan& plan) const;
  /// Changes whenever the configurations calls run with may change (set_table): a caller that
  /// keeps last_eager_plan() per shape re-reads it only when this differs.
  [[nodiscard]] std::uint64_t config_generation() const noexcept;
  /// JSON describing this thread's last extraction: the request, the stage reached, fusion
  /// groups, kernels, configs with provenance, MemRanges, and the error if one occurred.
  [[nodiscard]] std::string dump_extraction_context() const;

  struct Impl;

 private:
  c10::IValue eager(OpHandle op, const c10::IValue* args, std::size_t num_args, bool run);

  std::unique_ptr<Impl> impl_;
  FusionChecker fusion_;
  std::unique_ptr<executor::CpuExecutor> cpu_executor_;
};

}  // namespace ka::extractor
