#include "graph_case.hpp"
#include "graph_nodes.hpp"
#include "model.hpp"

#include <ka/core/error.hpp>
#include <ka/profiler/span.hpp>
#include <ka/runtime/runtime.hpp>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <pthread.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

namespace ka::harness::detail {
namespace {

std::shared_ptr<torch::jit::Graph> parse(const SuiteCase& c) {
  try {
    return runtime::parse_ir(c.ir);
  } catch (const ValueError& e) {
    KA_THROW(ValueError, "graph '", c.graph, "' of case '", c.name, "': ", e.what());
  }
}

// One value a graph returns, with where it sits in the outputs: "output 1", "output
// 0['logits']", "output 2[0]".
struct OutputLeaf {
  std::string label;
  c10::IValue value;
};

std::string key_text(const c10::IValue& key) {
  if (key.isString()) return "'" + key.toStringRef() + "'";
  if (key.isInt()) return std::to_string(key.toInt());
  return key.tagKind();
}

// Opens tuples, lists and dicts (values in insertion order), depth first.
void add_leaves(const c10::IValue& v, const std::string& label, std::vector<OutputLeaf>& out) {
  if (v.isTuple()) {
    const auto& elements = v.toTupleRef().elements();
    for (std::size_t i = 0; i < elements.size(); ++i) {
      add_leaves(elements[i], label + "[" + std::to_string(i) + "]", out);
    }
  } else if (v.isList()) {
    const c10::List<c10::IValue> list = v.toList();
    for (std::size_t i = 0; i < list.size(); ++i) {
      add_leaves(list.get(i), label + "[" + std::to_string(i) + "]", out);
    }
  } else if (v.isGenericDict()) {
    for (const auto& entry : v.toGenericDict()) {
      add_leaves(entry.value(), label + "[" + key_text(entry.key()) + "]", out);
    }
  } else {
    out.push_back({label, v});
  }
}

// A graph's outputs as leaves; one tuple returned is its elements ("output 0", "output 1", as
// a graph with several outputs).
std::vector<OutputLeaf> output_leaves(const std::vector<c10::IValue>& stack) {
  std::vector<c10::IValue> outputs = stack;
  if (outputs.size() == 1 && outputs[0].isTuple()) {
    outputs = outputs[0].toTupleRef().elements().vec();
  }
  std::vector<OutputLeaf> leaves;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    add_leaves(outputs[i], "output " + std::to_string(i), leaves);
  }
  return leaves;
}

// Compares one output tensor; returns false (with r.detail) on the first mismatch.
bool compare(const at::Tensor& got, const at::Tensor& want, const std::string& label, double rtol,
             double atol, CheckResult& r) {
  if (got.sizes() != want.sizes()) {
    r.detail = fmt::format("{}: ka's shape is [{}], libtorch's [{}]", label,
                           dims_text(got.sizes(), ", "), dims_text(want.sizes(), ", "));
    return false;
  }
  if (got.scalar_type() != want.scalar_type()) {
    r.detail = fmt::format("{}: ka's dtype is {}, libtorch's {}", label,
                           c10::toString(got.scalar_type()), c10::toString(want.scalar_type()));
    return false;
  }
  if (want.numel() == 0) return true;
  const at::Tensor g = got.to(at::kDouble);
  const at::Tensor w = want.to(at::kDouble);
  // atol scales with the output's magnitude: a GEMM of randn inputs with K = 3072 has outputs
  // near 55, a softmax near 1/S; one absolute bound would be too loose or too tight.
  const double rms = w.nan_to_num(0.0, 0.0, 0.0).pow(2).mean().sqrt().item<double>();
  const double abs_tol = rms > 0.0 ? atol * rms : atol;
  const at::Tensor diff = (g - w).abs();
  const at::Tensor bad =
      diff.gt(w.abs() * rtol + abs_tol).logical_or(g.isnan().logical_xor(w.isnan()));
  r.max_abs_error =
      std::max(r.max_abs_error,
               diff.nan_to_num(std::numeric_limits<double>::infinity()).max().item<double>());
  const auto nbad = bad.sum().item<std::int64_t>();
  if (nbad == 0) return true;
  const std::int64_t first = bad.flatten().nonzero()[0].item<std::int64_t>();
  std::int64_t flat = first;
  std::vector<std::int64_t> at_index(static_cast<std::size_t>(want.dim()));
  for (std::int64_t d = want.dim() - 1; d >= 0; --d) {
    at_index[static_cast<std::size_t>(d)] = flat % want.size(d);
    flat /= want.size(d);
  }
  r.detail = fmt::format(
      "{}: {} of {} elements differ beyond atol={:.3g} ({:g}*rms {:.3g}) rtol={:g}; first "
      "at [{}]: ka={} libtorch={}",
      label, nbad, want.numel(), abs_tol, atol, rms, rtol, dims_text(at_index, ", "),
      g.flatten()[first].item<double>(), w.flatten()[first].item<double>());
  return false;
}

// Compares one output that is not a tensor (a number, string, bool or None, as models return
// beside their tensors); returns false (with r.detail) when they differ.
bool compare_value(const c10::IValue& got, const c10::IValue& want, const std::string& label,
                   double rtol, CheckResult& r) {
  bool same = got.tagKind() == want.tagKind();
  if (same && want.isDouble()) {
    const double g = got.toDouble();
    const double w = want.toDouble();
    same = (std::isnan(g) && std::isnan(w)) || std::abs(g - w) <= rtol * std::abs(w) + 1e-12;
  } else if (same && want.isInt()) {
    same = got.toInt() == want.toInt();
  } else if (same && want.isBool()) {
    same = got.toBool() == want.toBool();
  } else if (same && want.isString()) {
    same = got.toStringRef() == want.toStringRef();
  } else if (same && !want.isNone()) {
    KA_THROW(ValueError, label, " is a ", want.tagKind(),
             "; ka-bench compares tensors, numbers, strings, bools and None (in tuples, lists and "
             "dicts)");
  }
  if (!same) {
    std::ostringstream g;
    std::ostringstream w;
    g << got;
    w << want;
    r.detail = fmt::format("{}: ka returned {} ({}), libtorch {} ({})", label, g.str(),
                           got.tagKind(), w.str(), want.tagKind());
  }
  return same;
}

// Note [Reference stack]
// torch::jit::Code::Code (libtorch 1.13) recurses about four frames per node of a dependency
// chain: measured on the default 8 MiB main-thread stack, a chain of 9,800 adds built and one
// of 9,900 overflowed it (SIGSEGV), about 850 B per node. GraphCase builds the Code on a
// thread of its own whose stack is kReferenceStackBaseBytes + kReferenceStackBytesPerNode per
// node (4.8x the measured need), so every graph within the suite's node limit (kMaxGraphNodes,
// Note [Graph node limit] in suite.cpp) gets enough; glibc maps the stack lazily, so only the
// depth the recursion reaches is ever touched.
constexpr std::size_t kReferenceStackBaseBytes = std::size_t{8} << 20;
constexpr std::size_t kReferenceStackBytesPerNode = 4096;

// Runs `fn` on a new thread with a stack of `stack_bytes` and waits for it; rethrows what it
// throws.
void run_with_stack(std::size_t stack_bytes, const std::function<void()>& fn) {
  struct Call {
    const std::function<void()>* fn;
    std::exception_ptr error;
  } call{&fn, nullptr};
  pthread_attr_t attr;
  KA_ASSERT(pthread_attr_init(&attr) == 0, "pthread_attr_init failed");
  const int set = pthread_attr_setstacksize(&attr, stack_bytes);
  pthread_t thread;
  const int made = set != 0 ? set : pthread_create(&thread, &attr, [](void* p) -> void* {
    auto* c = static_cast<Call*>(p);
    try {
      (*c->fn)();
    } catch (...) {
      c->error = std::current_exception();
    }
    return nullptr;
  }, &call);
  pthread_attr_destroy(&attr);
  KA_CHECK(made == 0, "cannot start a thread with a ", stack_bytes >> 20,
           " MiB stack for libtorch's reference: ", std::strerror(made));
  pthread_join(thread, nullptr);
  if (call.error) std::rethrow_exception(call.error);
}

template <typename T, typename F>
std::string join_unique(const std::vector<T>& items, const char* sep, F&& f) {
  std::vector<std::string> seen;
  std::string s;
  for (const auto& item : items) {
    std::string v = f(item);
    if (std::find(seen.begin(), seen.end(), v) != seen.end()) continue;
    s += (s.empty() ? "" : sep) + v;
    seen.push_back(std::move(v));
  }
  return s;
}

}  // namespace

// Note [Graph cases run a lowered graph]
// A graph case lowers its graph to ka's OpGraph once (Runtime::try_lower, its inputs bound) and
// runs that OpGraph on every call, so a timed call is what a program that keeps its lowered
// graph pays: extraction, fallbacks and execution, not the walk over TorchScript's nodes. A
// graph ka cannot lower (control flow) is compiled for libtorch's interpreter once
// (Runtime::interpret) and runs there on every call, as a program keeping it would.
struct GraphCase::Impl {
  SuiteCase c;
  runtime::Runtime rt;
  std::shared_ptr<const LoadedModel> model;      // module cases
  std::shared_ptr<torch::jit::Graph> graph;      // ka's
  std::optional<extractor::OpGraph> lowered;     // of graph, inputs bound; none: interpreter
  std::optional<runtime::Runtime::InterpretedGraph> interpreted;  // when lowered is empty
  std::shared_ptr<torch::jit::Graph> ref_graph;  // the interpreter's own copy (graph cases)
  std::unique_ptr<torch::jit::Code> code;
  std::vector<c10::IValue> inputs;               // module cases: the module first
  std::array<std::vector<extractor::TaskPlan>, 2> plans;  // fused, unfused
  std::vector<OutputLeaf> reference;  // libtorch's outputs, from the first check

  std::vector<c10::IValue> run_reference() const {
    if (model) {
      torch::jit::Module m = model->module;
      return {m.forward(std::vector<c10::IValue>(inputs.begin() + 1, inputs.end()))};
    }
    std::vector<c10::IValue> stack = inputs;
    torch::jit::InterpreterState(*code).run(stack);
    return stack;
  }

  runtime::GraphResult run_ka(bool fusion, bool describe_fallbacks = false) {
    if (!lowered) return runtime::Runtime::run_in_interpreter(*interpreted, inputs);
    return rt.run_lowered(*lowered, {fusion, describe_fallbacks});
  }
};

GraphCase::GraphCase(const SuiteCase& c, std::uint64_t seed) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.c = c;
  if (c.is_module()) {
    s.model = load_model(c.module_file);
    check_module_inputs(*s.model, s.c);
    s.graph = s.model->graph->copy();
    s.inputs.emplace_back(s.model->module._ivalue());
  } else {
    s.graph = parse(c);
    s.ref_graph = parse(c);
    // See Note [Reference stack].
    const std::size_t stack =
        kReferenceStackBaseBytes + kReferenceStackBytesPerNode * count_graph_nodes(*s.ref_graph);
    run_with_stack(stack, [&] {
      s.code = std::make_unique<torch::jit::Code>(s.ref_graph, "ka_bench_reference");
    });
  }
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (const GraphInput& in : s.c.inputs) s.inputs.emplace_back(make_input(in, gen));
  std::string why;
  s.lowered = runtime::Runtime::try_lower(*s.graph, s.inputs, why);
  if (!s.lowered) {
    // See Note [Reference stack]: libtorch compiles the graph recursively.
    const std::size_t stack =
        kReferenceStackBaseBytes + kReferenceStackBytesPerNode * count_graph_nodes(*s.graph);
    run_with_stack(stack, [&] { s.interpreted = runtime::Runtime::interpret(*s.graph, why); });
  }
}

GraphCase::~GraphCase() = default;

void GraphCase::run_pipeline() {
  Impl& s = *impl_;
  KA_SPAN("call");
  s.run_ka(true);
}

GraphCase::FusionTiming GraphCase::time_fusion(const profiler::MeasureOptions& options) {
  Impl& s = *impl_;
  FusionTiming t;
  (void)check(0);  // runs once fused and records the plan; throws what ka throws
  t.plan = info(0);
  t.fused = profiler::measure([&] { s.run_ka(true); }, options);
  t.unfused = profiler::measure([&] { s.run_ka(false); }, options);
  return t;
}

profiler::Measurement GraphCase::time_fused_with(
    std::shared_ptr<const db::RecommendationTable> table, const profiler::MeasureOptions& options) {
  Impl& s = *impl_;
  extractor::Extractor& ex = s.rt.extractor();
  const auto found = ex.table(DeviceType::kCPU);
  ex.set_table(std::move(table), DeviceType::kCPU);
  try {
    auto m = profiler::measure([&] { s.run_ka(true); }, options);
    ex.set_table(found, DeviceType::kCPU);
    return m;
  } catch (...) {
    ex.set_table(found, DeviceType::kCPU);
    throw;
  }
}

Status GraphCase::run(std::size_t v) {
  Impl& s = *impl_;
  if (v < 2) {
    s.run_ka(v == 0);
  } else {
    s.run_reference();
  }
  return Status::ok();
}

OpProfile GraphCase::profile_ops(int calls) {
  Impl& s = *impl_;
  profiler::SpanRecorder& recorder = profiler::SpanRecorder::global();
  const bool was_enabled = recorder.enabled();
  recorder.set_enabled(true);
  std::vector<std::vector<extractor::TaskPlan>> runs;
  const auto start = profiler::now_ns();
  for (int k = 0; k < calls; ++k) runs.push_back(s.run_ka(true, true).tasks);
  const auto end = profiler::now_ns();
  recorder.set_enabled(was_enabled);
  std::map<std::uint64_t, const extractor::TaskPlan*> by_id;
  for (const auto& run : runs) {
    for (const extractor::TaskPlan& p : run) by_id[p.task_id] = &p;
  }
  // Rows keyed by (op, shapes, served), in first-seen order.
  std::map<std::string, std::size_t> row_of;
  OpProfile profile;
  profile.graph_calls = calls;
  profile.wall_ns = static_cast<double>(end - start) / calls;
  const auto row_for = [&](const extractor::TaskPlan& p) -> OpProfile::Row& {
    const std::string served = p.provenance == db::Provenance::kFallback ? "libtorch"
                               : p.pattern.rfind("fused::", 0) == 0     ? "ka fused"
                                                                        : "ka";
    const std::string key = p.pattern + '\n' + p.shape_key + '\n' + served;
    const auto [it, added] = row_of.emplace(key, profile.rows.size());
    if (added) profile.rows.push_back({p.pattern, p.shape_key, served, 0, 0.0});
    return profile.rows[it->second];
  };
  for (const auto& run : runs) {
    for (const extractor::TaskPlan& p : run) ++row_for(p).calls;
  }
  for (const profiler::Span& span : recorder.collect()) {
    if (span.name != "block" && span.name != "fallback") continue;
    const auto it = by_id.find(span.task_id);
    if (it == by_id.end()) continue;
    row_for(*it->second).busy_ns += static_cast<double>(span.duration_ns());
  }
  if (!was_enabled) recorder.clear();
  for (OpProfile::Row& r : profile.rows) {
    r.calls /= calls;
    r.busy_ns /= calls;
  }
  std::stable_sort(profile.rows.begin(), profile.rows.end(),
                   [](const OpProfile::Row& a, const OpProfile::Row& b) { return a.busy_ns > b.busy_ns; });
  return profile;
}

CheckResult GraphCase::check(std::size_t v) {
  Impl& s = *impl_;
  KA_ASSERT(v < 2, "GraphCase::check of variant ", v, ", which is not ka's");
  CheckResult r;
  // The inputs never change, so one reference run serves the checks of both ka variants.
  if (s.reference.empty()) s.reference = output_leaves(s.run_reference());
  const std::vector<OutputLeaf>& want = s.reference;
  runtime::GraphResult got_run;
  try {
    got_run = s.run_ka(v == 0, true);
  } catch (const NotImplementedError& e) {
    // ka has no kernel for some node or shape: the case is unsupported, not wrong.
    r.refused = true;
    r.detail = e.what();
    return r;
  }
  s.plans[v] = std::move(got_run.tasks);
  const std::vector<OutputLeaf> got = output_leaves(got_run.outputs);
  if (got.size() != want.size()) {
    r.detail = fmt::format("ka returned {} outputs, libtorch {} (tensors and values, counted "
                           "inside tuples, lists and dicts)", got.size(), want.size());
    return r;
  }
  for (std::size_t i = 0; i < want.size(); ++i) {
    const c10::IValue& w = want[i].value;
    const c10::IValue& g = got[i].value;
    if (w.isTensor() && g.isTensor()) {
      if (!compare(g.toTensor(), w.toTensor(), want[i].label, s.c.rtol, s.c.atol, r)) return r;
    } else if (!compare_value(g, w, want[i].label, s.c.rtol, r)) {
      return r;
    }
  }
  r.correct = true;
  return r;
}

VariantInfo GraphCase::info(std::size_t v) const {
  const Impl& s = *impl_;
  VariantInfo info;
  info.op = (s.model ? "model:" : "graph:") + s.c.graph;
  for_each_input_leaf(s.c.inputs, [&](const GraphInput& in) {
    info.shape_key += (info.shape_key.empty() ? "" : ",") + in.name + "=";
    if (in.value) {
      info.shape_key += to_string(*in.value);
      return;
    }
    info.shape_key +=
        dims_text(in.shape, "x") +
        (in.dtype == InputDtype::kFloat32 ? "" : std::string(":") + to_string(in.dtype));
  });
  if (!s.reference.empty()) {
    for (const c10::IValue& in : s.inputs) {
      // A Tuple or List input's tensors too (Note [Container inputs], model.cpp).
      for (const OutputLeaf& leaf : output_leaves({in})) {
        if (leaf.value.isTensor()) {
          info.min_bytes += static_cast<double>(leaf.value.toTensor().nbytes());
        }
      }
    }
    for (const OutputLeaf& out : s.reference) {
      if (!out.value.isTensor()) continue;
      info.min_bytes += static_cast<double>(out.value.toTensor().nbytes());
    }
  }
  if (v >= 2) {
    info.kernel = s.model ? "the frozen module's forward (torch::jit)"
                          : "torch::jit interpreter (one ATen call per node)";
    return info;
  }
  std::map<std::uint64_t, int> ids;
  for (const extractor::TaskPlan& p : s.plans[v]) {
    TaskInfo t;
    t.id = static_cast<int>(info.tasks.size()) + 1;
    ids[p.task_id] = t.id;
    t.pattern = p.pattern;
    t.nodes = p.nodes;
    t.fusion = p.fusion;
    t.kernel = p.kernel;
    t.kernel_version = p.kernel_version;
    t.device = p.device;
    t.shape_key = p.shape_key;
    t.config = p.config;
    t.provenance = p.provenance;
    t.fallback = p.fallback;
    for (const std::uint64_t d : p.dependencies) {
      const auto it = ids.find(d);
      if (it != ids.end()) t.after.push_back(it->second);
    }
    info.tasks.push_back(std::move(t));
  }
  info.kernel = join_unique(info.tasks, " + ", [](const TaskInfo& t) {
    return t.provenance == db::Provenance::kFallback
               ? t.kernel
               : t.kernel + " v" + std::to_string(t.kernel_version);
  });
  if (info.tasks.size() == 1) info.kernel_version = info.tasks[0].kernel_version;
  for (const TaskInfo& t : info.tasks) {
    if (t.provenance == db::Provenance::kFallback) continue;  // libtorch's: no config
    info.config += (info.config.empty() ? "" : " | ") + t.config;
  }
  info.provenance = join_unique(info.tasks, ",", [](const TaskInfo& t) {
    return std::string(db::to_string(t.provenance));
  });
  return info;
}

}  // namespace ka::harness::detail
