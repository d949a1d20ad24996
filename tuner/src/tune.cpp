// ka-tune's engine. See Note [Tuning a shape].
#include <ka/core/error.hpp>
#include <ka/core/fingerprint.hpp>
#include <ka/core/logging.hpp>
#include <ka/core/option_checks.hpp>
#include <ka/core/text.hpp>
#include <ka/db/recommendation_io.hpp>
#include <ka/db/results_store.hpp>
#include <ka/executor/cuda_executor.hpp>
#include <ka/extractor/extractor.hpp>
#include <ka/kernels/cpu_launch.hpp>
#include <ka/kernels/cuda_limits.hpp>
#include <ka/tuner/paired_finals.hpp>
#include <ka/tuner/search.hpp>
#include <ka/tuner/tune.hpp>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cmath>
#include <map>
#include <set>
#include <optional>

namespace ka::tuner {

// Note [Tuning a shape]
// 1. The call is built from the shape (inputs uniform in [-1, 1), seeded) and extracted once
//    per configuration (a PreparedCall: packed once, run many times); the first run's output
//    is checked against libtorch on the CPU (|ka - ref| <= 1e-5·sqrt(K) + 1e-4·|ref|, K the
//    length of a GEMM's or a sum's reduction, else 1), so a configuration that computes
//    garbage is recorded 'incorrect', never recommended. With --device cuda the inputs are
//    copied to the GPU and ka's CUDA kernels run there; the reference stays libtorch's CPU
//    result (an oracle independent of the device).
// 2. Each configuration is timed by profiler::measure (CPU) or profiler::measure_cuda (CUDA
//    events) (warm-up, repetitions until the CI95 half-width of the median is within the
//    target or the budget ends) and written to the
//    `trials` table at once, in its own transaction. Trials an earlier run stored for the same
//    device, kernel version, shape and configuration (hot cache) are reused, not re-run: that
//    is how a killed sweep resumes, and a run never stores one configuration twice.
//    A configuration that runs exactly as one already measured on this shape (the same
//    KernelDescriptor::canonical form: a tile taller than M, a K block deeper than K, an
//    "auto" size that resolves to a listed one) is not run again: it gets that measurement
//    and no row of its own (replay finds it by the same rule), and does not count against
//    --budget. An exhaustive sweep of a small shape is mostly such configurations.
// 3. The fastest `finalists` (distinct canonical forms, none the default's) and the default
//    are timed again in paired rounds, a quarter of --config-budget each; the rule of
//    Note [Paired finals] (ka/tuner/paired_finals.hpp) picks the winner.
// 4. The winner is written to `recommendations` with its median and its gain over the
//    default configuration.

namespace {

struct ShapeCall {
  std::vector<c10::IValue> args;
  at::Tensor reference;
  std::int64_t k = 1;
};

// The ops ka-tune can tune and the form of their shapes: GEMMs take MxKxN (BxMxKxN for bmm),
// the others the sizes of their input (softmax, layer_norm and sum over its last dim; a
// binary op's second input has the same sizes; gelu is the exact form, approximate='none').
struct TunableOp {
  const char* op;
  std::size_t min_dims;
  std::size_t max_dims;
  const char* form;  // for error messages
};
constexpr const char* kSizes = "the input's sizes, 1 to 4 dims, e.g. 4096x4096";
constexpr TunableOp kTunableOps[] = {
    {"aten::mm", 3, 3, "MxKxN"},        {"aten::addmm", 3, 3, "MxKxN"},
    {"aten::bmm", 4, 4, "BxMxKxN"},     {"aten::_softmax", 1, 4, kSizes},
    {"aten::layer_norm", 1, 4, kSizes}, {"aten::sum.dim_IntList", 1, 4, kSizes},
    {"aten::add.Tensor", 1, 4, kSizes}, {"aten::mul.Tensor", 1, 4, kSizes},
    {"aten::relu", 1, 4, kSizes},       {"aten::gelu", 1, 4, kSizes},
    {"aten::sigmoid", 1, 4, kSizes},    {"aten::silu", 1, 4, kSizes},
};

const TunableOp& tunable_op(const std::string& op) {
  for (const TunableOp& t : kTunableOps) {
    if (op == t.op) return t;
  }
  std::string names;
  for (const TunableOp& t : kTunableOps) names += (names.empty() ? "" : ", ") + std::string(t.op);
  KA_THROW(ValueError, "--op ", op, " is not tunable yet (tunable: ", names, ")");
}

std::vector<std::int64_t> parse_dims(const std::string& op, const std::string& shape) {
  const TunableOp& t = tunable_op(op);
  std::vector<std::int64_t> dims;
  for (const std::string_view piece : split(shape, 'x')) {
    const std::string part(piece);
    char* end = nullptr;
    const long long v = std::strtoll(part.c_str(), &end, 10);
    KA_CHECK(!part.empty() && end != nullptr && *end == '\0' && v > 0, "bad shape '", shape,
             "' for ", op, ": expected positive integers separated by 'x' (", t.form, ")");
    dims.push_back(v);
  }
  KA_CHECK(dims.size() >= t.min_dims && dims.size() <= t.max_dims, "bad shape '", shape,
           "' for ", op, ": expected ", t.form);
  return dims;
}

ShapeCall make_call(const std::string& op, const std::string& shape) {
  const auto d = parse_dims(op, shape);
  ShapeCall c;
  auto uniform = [](c10::IntArrayRef sizes) { return at::rand(sizes) * 2 - 1; };
  if (op == "aten::mm" || op == "aten::addmm") {
    const at::Tensor a = uniform({d[0], d[1]});
    const at::Tensor b = uniform({d[1], d[2]});
    c.k = d[1];
    if (op == "aten::mm") {
      c.args = {a, b};
      c.reference = at::mm(a, b);
    } else {
      const at::Tensor bias = uniform({d[2]});
      c.args = {bias, a, b, 1, 1};
      c.reference = at::addmm(bias, a, b);
    }
    return c;
  }
  if (op == "aten::bmm") {
    const at::Tensor a = uniform({d[0], d[1], d[2]});
    const at::Tensor b = uniform({d[0], d[2], d[3]});
    c.k = d[2];
    c.args = {a, b};
    c.reference = at::bmm(a, b);
    return c;
  }
  const at::Tensor x = uniform(d);
  const std::int64_t last = d.back();
  if (op == "aten::_softmax") {
    c.args = {x, -1, false};
    c.reference = at::_softmax(x, -1, false);
  } else if (op == "aten::layer_norm") {
    const at::Tensor w = uniform({last});
    const at::Tensor b = uniform({last});
    c.args = {x, std::vector<std::int64_t>{last}, w, b, 1e-5, true};
    c.reference = at::layer_norm(x, {last}, w, b, 1e-5);
  } else if (op == "aten::sum.dim_IntList") {
    c.k = last;
    c.args = {x, c10::IValue(std::vector<std::int64_t>{-1}), false, c10::IValue()};
    c.reference = at::sum(x, {-1});
  } else if (op == "aten::add.Tensor" || op == "aten::mul.Tensor") {
    const at::Tensor y = uniform(d);
    c.args = op == "aten::add.Tensor" ? std::vector<c10::IValue>{x, y, 1}
                                      : std::vector<c10::IValue>{x, y};
    c.reference = op == "aten::add.Tensor" ? x + y : x * y;
  } else if (op == "aten::gelu") {
    c.args = {x, std::string("none")};
    c.reference = at::gelu(x);
  } else if (op == "aten::relu") {
    c.args = {x};
    c.reference = at::relu(x);
  } else if (op == "aten::sigmoid") {
    c.args = {x};
    c.reference = at::sigmoid(x);
  } else if (op == "aten::silu") {
    c.args = {x};
    c.reference = at::silu(x);
  } else {  // in kTunableOps without a call built here
    KA_THROW(InternalError, "no call is built for ", op, ", a tunable op");
  }
  return c;
}

// The call's tensor arguments copied to `device` (the reference stays where it was computed).
void move_args(ShapeCall& c, DeviceType device) {
  if (device == DeviceType::kCPU) return;
  for (c10::IValue& a : c.args) {
    if (a.isTensor()) a = a.toTensor().to(at::Device(at::kCUDA, 0));
  }
}

// Device time of one run of `call`: CPU calls by the host clock, CUDA calls by events.
profiler::Measurement time_call(const extractor::PreparedCall& call,
                                const profiler::MeasureOptions& options) {
  if (call.device().type == DeviceType::kCUDA) {
    return profiler::measure_cuda([&call](void* stream) { call.enqueue(stream); }, options);
  }
  return profiler::measure([&call] { call.run(); }, options);
}

// The fingerprint trials and recommendations are stored under: this CPU's, or the GPU's.
// Throws ka::CudaError when CUDA was asked for and cannot be used here.
DeviceFingerprint device_fingerprint(DeviceType device) {
  if (device == DeviceType::kCPU) return cpu_fingerprint();
  std::string why;
  KA_CHECK_TYPE(CudaError, executor::cuda_device_available(&why),
                "--device cuda: no CUDA device to tune on (", why, ")");
  KA_CHECK_TYPE(CudaError, at::hasCUDA(),
                "--device cuda: the libtorch ka is linked with has no CUDA, so the "
                "inputs cannot be placed on the GPU (build ka against a CUDA libtorch)");
  const std::optional<DeviceFingerprint> fp = kernels::current_cuda_fingerprint();
  KA_CHECK_TYPE(CudaError, fp.has_value(), "--device cuda: the GPU's properties could not be read");
  return *fp;
}

std::string check_output(const at::Tensor& device_result, const ShapeCall& c) {
  const at::Tensor got = device_result.to(at::kCPU);
  const double atol = 1e-5 * std::sqrt(static_cast<double>(c.k));
  const at::Tensor err = (got - c.reference).abs() - (atol + 1e-4 * c.reference.abs());
  if (err.numel() == 0 || err.max().item<double>() <= 0.0) return {};
  return fmt::format("max |ka - ref| = {:.3g} exceeds the tolerance (atol {:.3g}, rtol 1e-4)",
                     (got - c.reference).abs().max().item<double>(), atol);
}

db::TrialRow trial_row(const extractor::PreparedCall& call, const LaunchConfig& point,
                       const std::string& op, profiler::CacheMode options_mode) {
  db::TrialRow row;
  row.op = op;
  row.shape_key = call.shape_key().str();
  row.kernel = call.kernel().name;
  row.kernel_version = call.kernel().version;
  row.config = point.str();
  row.cache_state = profiler::to_string(options_mode);
  return row;
}

// `point`'s canonical form for `shape` as text (KernelDescriptor::canonical; the point itself
// for a kernel without one): equal texts run alike (Note [Tuning a shape], 2).
std::string canonical_form(const kernels::KernelDescriptor& d, const ShapeKey& shape,
                           const LaunchConfig& point) {
  return d.canonical ? d.canonical(shape, point).str() : point.str();
}

// Trials stored earlier for this device, kernel version and shape: config text → median
// (nullopt for a configuration that did not run ok).
std::map<std::string, Evaluation> earlier_trials(db::ResultsStore& store, const std::string& fp,
                                                 const std::string& op, const std::string& key,
                                                 const kernels::KernelDescriptor& d,
                                                 const char* cache_state) {
  std::map<std::string, Evaluation> out;
  auto st = store.connection().prepare(
      "SELECT t.config, t.disposition, t.median_ns FROM trials t JOIN runs r ON r.id = t.run_id "
      "WHERE r.fingerprint = ?1 AND t.op = ?2 AND t.shape_key = ?3 AND t.kernel = ?4 AND "
      "t.kernel_version = ?5 AND t.cache_state = ?6 ORDER BY t.id");
  st.bind(1, fp).bind(2, op).bind(3, key).bind(4, d.name).bind(5, d.version).bind(6, cache_state);
  while (st.step()) {
    const std::string disposition = st.column_text(1);
    out[st.column_text(0)] = disposition == "ok" && !st.column_is_null(2)
                                 ? Evaluation(st.column_double(2))
                                 : std::nullopt;
  }
  return out;
}

void progress_line(std::FILE* out, std::size_t shape_index, std::size_t shapes,
                   const std::string& shape, std::size_t done, std::size_t space,
                   const History& h, const SearchSpace& s, double elapsed_s) {
  if (out == nullptr) return;
  const auto best = h.best();
  const std::string best_text =
      best ? fmt::format("best {} ({})", profiler::format_duration_ns(*h.results[*best]),
                         params_str(s.point(h.points[*best])))
           : std::string("no ok result yet");
  const int width = 24;
  const int filled = space == 0 ? width : static_cast<int>(width * done / space);
  fmt::print(out, "\r[{}/{}] {} [{}{}] {}/{} configs, {}, {:.0f} s\x1b[K", shape_index + 1, shapes,
             shape, std::string(static_cast<std::size_t>(filled), '#'),
             std::string(static_cast<std::size_t>(width - filled), '.'), done, space, best_text,
             elapsed_s);
  std::fflush(out);
}

// `space` with its `threads` candidates cut to at most `limit` (0: unchanged).
kernels::TunableSpace threads_at_most(const kernels::TunableSpace& space, int limit) {
  if (limit <= 0) return space;
  std::vector<kernels::TunableParam> params = space.params();
  for (auto& p : params) {
    if (p.name != "threads") continue;
    std::vector<std::int64_t> kept;
    for (const auto t : p.candidates) {
      if (t <= limit) kept.push_back(t);
    }
    p.candidates = kept.empty() ? std::vector<std::int64_t>{limit} : kept;
  }
  return kernels::TunableSpace(std::move(params), space.constraints());
}

// Note [Stopping after N trials for tests]
// KA_TEST_STOP_AFTER_TRIALS=N makes ka-tune stop itself (SIGSTOP) right after storing its N-th
// trial, so a test can kill it at a known point of the sweep instead of racing the machine's
// speed (tests/cli/ka_tune_cli_test.sh, resume_after_kill). Unset, it costs one comparison.
void stop_for_tests_after(std::size_t stored) {
  static const long stop_at = [] {
    const char* v = std::getenv("KA_TEST_STOP_AFTER_TRIALS");
    return v != nullptr ? std::strtol(v, nullptr, 10) : 0L;
  }();
  if (stop_at > 0 && stored == static_cast<std::size_t>(stop_at)) std::raise(SIGSTOP);
}

// Throws for a request that cannot run, before anything is recorded: no shapes, an unknown
// strategy, a shape the op does not take, a thread count or budget that makes no sense, a
// database that keeps nothing.
void check_options(const TuneOptions& o) {
  KA_CHECK(!o.shapes.empty(), "no shapes to tune for ", o.op, " (give --shapes or --suite)");
  (void)make_strategy(o.strategy, o.seed);
  for (const std::string& shape : o.shapes) (void)parse_dims(o.op, shape);
  KA_CHECK(o.threads >= 0 && o.threads <= max_threads(), "--threads ", o.threads,
           ": expected 0 (all cores) to ", max_threads());
  // `!(x > 0)` also refuses NaN; the time budget may be infinite (its default: no limit).
  KA_CHECK(o.time_budget_s > 0, "--time-budget ", o.time_budget_s, ": expected seconds > 0");
  KA_CHECK(o.finalists >= 1, "--finalists ", o.finalists, ": expected 1 or more");
  KA_CHECK(std::isfinite(o.measure.budget_s) && o.measure.budget_s > 0, "--config-budget ",
           o.measure.budget_s, ": expected finite seconds > 0");
  KA_CHECK(std::isfinite(o.measure.target_rel_ci95) && o.measure.target_rel_ci95 > 0,
           "--target-ci ", o.measure.target_rel_ci95, ": expected a finite fraction > 0");
  require_database_file("--db", o.db_path);
}

// One call of tune(): the op, the device's fingerprint, and the store whose `runs` row is
// open from construction until finish_run().
struct TuneRun {
  explicit TuneRun(const TuneOptions& o)
      : options(o),
        ex(extractor::Extractor::global()),
        handle(ex.resolve(o.op)),
        fp(device_fingerprint(o.device)),
        store(o.db_path) {
    store.record_device(fp);
    db::RunInfo info = db::run_info(fp, "ka-tune", o.command_line);
    info.suite = "";
    id = store.begin_run(info);
  }

  const TuneOptions& options;
  extractor::Extractor& ex;
  const extractor::OpHandle handle;
  const DeviceFingerprint fp;
  db::ResultsStore store;
  std::int64_t id = 0;
  std::size_t stored_here = 0;  // trials this process stored
};

// Shape `index`'s call: its inputs drawn from the seed for that index, placed on the device.
ShapeCall seeded_call(const TuneOptions& o, std::size_t index) {
  at::manual_seed(static_cast<std::uint64_t>(index) + o.seed);
  ShapeCall c = make_call(o.op, o.shapes[index]);
  move_args(c, o.device);
  return c;
}

// The median the sweep stored in `row` for a configuration timed as `m`.
void set_timing(db::TrialRow& row, const profiler::Measurement& m) {
  row.median_ns = m.median_ns();
  row.mean_ns = m.summary.mean;
  row.min_ns = m.summary.min;
  row.max_ns = m.summary.max;
  row.stddev_ns = m.summary.stddev;
  // Below 6 samples the median has no 95% interval: store none rather than inf.
  if (std::isfinite(m.median_ci95.half_width())) row.ci95_ns = m.median_ci95.half_width();
  row.repetitions = static_cast<std::int64_t>(m.repetitions());
}

// The finals' candidates: the default configuration first, then the finalists.
struct Finals {
  std::vector<LaunchConfig> configs;
  std::vector<FinalRound> rounds;
};

// One shape of a run, tuned as Note [Tuning a shape] says:
//
//   ShapeOutcome out = ShapeTuner(run, index).tune();
class ShapeTuner {
 public:
  ShapeTuner(TuneRun& run, std::size_t index);

  // Sweeps the shape, times the finalists against the default and stores the winner.
  ShapeOutcome tune() {
    const History h = sweep(resume_earlier_trials());
    if (!h.best()) {
      log().warn("{}: no configuration ran correctly; nothing recommended", out_.shape_key);
      return out_;
    }
    const Finals finals = time_finals(pick_finalists(h));
    recommend(finals, select_winner(finals.rounds));
    return out_;
  }

 private:
  std::unique_ptr<extractor::PreparedCall> prepare(const LaunchConfig* config) const {
    return run_.ex.prepare_call(run_.handle, call_.args.data(), call_.args.size(), config);
  }
  std::string canonical_of(const LaunchConfig& point) const {
    return canonical_form(kernel_, base_->shape_key(), point);
  }
  History resume_earlier_trials();
  History sweep(History resumed);
  Evaluation evaluate(std::size_t i);
  Evaluation run_checked(const extractor::PreparedCall& call, db::TrialRow& row) const;
  std::vector<std::size_t> pick_finalists(const History& h) const;
  Finals time_finals(const std::vector<std::size_t>& finalists) const;
  void recommend(const Finals& finals, const FinalsVerdict& verdict);

  TuneRun& run_;
  const TuneOptions& o_;
  const std::size_t index_;
  const ShapeCall call_;
  const std::unique_ptr<extractor::PreparedCall> base_;  // the default configuration
  const kernels::KernelDescriptor& kernel_;
  const SearchSpace space_;
  ShapeOutcome out_;
  std::map<std::string, Evaluation> by_canonical_;  // Note [Tuning a shape], 2
  bool last_equivalent_ = false;  // the last evaluation was free (not against --budget)
};

ShapeTuner::ShapeTuner(TuneRun& run, std::size_t index)
    : run_(run),
      o_(run.options),
      index_(index),
      call_(seeded_call(o_, index)),
      base_(prepare(nullptr)),
      kernel_(base_->kernel()),
      space_(threads_at_most(kernel_.space, o_.threads)) {
  KA_CHECK(space_.size() > 0, kernel_.name, " has no valid configuration to sweep for ", o_.op,
           " at shape ", o_.shapes[index], " (--threads ", o_.threads, ")");
  out_.shape = o_.shapes[index];
  out_.shape_key = base_->shape_key().str();
  out_.kernel = kernel_.name;
  out_.space = space_.size();
}

// What earlier runs measured on this shape, as the history the strategy starts from: it is
// history, not work (Note [Tuning a shape], 2).
History ShapeTuner::resume_earlier_trials() {
  History resumed;
  if (o_.fresh) return resumed;
  const auto earlier = earlier_trials(run_.store, run_.fp.key(), base_->lookup_op(), out_.shape_key,
                                      kernel_, profiler::to_string(o_.measure.mode));
  for (std::size_t i = 0; i < space_.size(); ++i) {
    const auto it = earlier.find(space_.point(i).str());
    if (it == earlier.end()) continue;
    resumed.points.push_back(i);
    resumed.results.push_back(it->second);
  }
  out_.reused = resumed.points.size();
  for (std::size_t j = 0; j < resumed.points.size(); ++j) {
    if (resumed.results[j]) {
      by_canonical_.emplace(canonical_of(space_.point(resumed.points[j])), resumed.results[j]);
    }
  }
  return resumed;
}

// The strategy's search from `resumed` within the budgets, with a progress line.
History ShapeTuner::sweep(History resumed) {
  const auto start = std::chrono::steady_clock::now();
  const auto strategy = make_strategy(o_.strategy, o_.seed, space_.find(base_->default_config()));
  const Budget budget{o_.budget, o_.time_budget_s,
                      [this](std::size_t) { return !last_equivalent_; }};
  History h = search(
      space_, *strategy, [this](std::size_t i) { return evaluate(i); }, budget,
      [&](std::size_t, const Evaluation&, const History& hist) {
        progress_line(
            o_.progress, index_, o_.shapes.size(), out_.shape, hist.points.size(), space_.size(),
            hist, space_,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      },
      std::move(resumed));
  if (o_.progress != nullptr) std::fputc('\n', o_.progress);
  return h;
}

// Point `i`'s median, or nullopt when it did not run ok. Each configuration run is stored as
// a trial with its disposition; one that runs as one measured already (same canonical form) is
// given that one's result and is neither run nor stored.
Evaluation ShapeTuner::evaluate(std::size_t i) {
  last_equivalent_ = false;
  const LaunchConfig& point = space_.point(i);
  db::TrialRow row;
  Evaluation result;
  try {
    const auto call = prepare(&point);
    row = trial_row(*call, point, base_->lookup_op(), o_.measure.mode);
    if (!call->status()) {
      row.disposition = db::Disposition::kUnsupported;
      row.error = call->status().reason();
    } else {
      const std::string canonical = canonical_of(point);
      if (const auto same = by_canonical_.find(canonical); same != by_canonical_.end()) {
        ++out_.equivalent;
        last_equivalent_ = true;
        return same->second;
      }
      result = run_checked(*call, row);
      if (result) by_canonical_.emplace(canonical, result);
    }
  } catch (const Error& e) {
    row = trial_row(*base_, point, base_->lookup_op(), o_.measure.mode);
    row.disposition = db::Disposition::kFailed;
    row.error = e.what();
  }
  if (!result) ++out_.failed;
  ++out_.evaluated;
  run_.store.add_trials(run_.id, {row});  // one transaction: a kill loses at most this trial
  stop_for_tests_after(++run_.stored_here);
  return result;
}

// Runs `call` once and checks its output against libtorch's; only a correct one is timed.
// The outcome goes into `row`; returns the median, or nullopt for a wrong output.
Evaluation ShapeTuner::run_checked(const extractor::PreparedCall& call, db::TrialRow& row) const {
  call.run();
  if (std::string bad = check_output(call.result().toTensor(), call_); !bad.empty()) {
    row.disposition = db::Disposition::kIncorrect;
    row.error = bad;
    return std::nullopt;
  }
  const profiler::Measurement m = time_call(call, o_.measure);
  set_timing(row, m);
  return m.median_ns();
}

// The fastest `finalists` points of the sweep, fastest first, with distinct canonical forms
// and none the default's: equivalent configurations share one measurement, and timing a
// configuration against itself in the finals measures only noise.
std::vector<std::size_t> ShapeTuner::pick_finalists(const History& h) const {
  std::vector<std::size_t> ranked;
  for (std::size_t j = 0; j < h.points.size(); ++j) {
    if (h.results[j]) ranked.push_back(j);
  }
  std::sort(ranked.begin(), ranked.end(),
            [&](std::size_t a, std::size_t b) { return *h.results[a] < *h.results[b]; });
  const auto wanted = static_cast<std::size_t>(std::max(1, o_.finalists));
  std::vector<std::size_t> finalists;
  std::set<std::string> taken = {canonical_of(params_of(base_->default_config()))};
  for (const std::size_t j : ranked) {
    if (finalists.size() >= wanted) break;
    if (taken.insert(canonical_of(space_.point(h.points[j]))).second) {
      finalists.push_back(h.points[j]);
    }
  }
  return finalists;
}

// The default configuration (candidate 0; it need not be a point of the space: heuristics
// pick shape-specific tiles) and the finalists the kernel accepts, timed in kFinalRounds
// paired rounds of a quarter of --config-budget each, each round starting one candidate
// further along (Note [Paired finals]).
Finals ShapeTuner::time_finals(const std::vector<std::size_t>& finalists) const {
  Finals f;
  std::vector<std::unique_ptr<extractor::PreparedCall>> owned;
  std::vector<const extractor::PreparedCall*> calls = {base_.get()};
  f.configs = {params_of(base_->default_config())};
  for (const std::size_t p : finalists) {
    auto call = prepare(&space_.point(p));
    if (!call->status()) continue;
    calls.push_back(call.get());
    owned.push_back(std::move(call));
    f.configs.push_back(space_.point(p));
  }
  profiler::MeasureOptions round_options = o_.measure;
  round_options.budget_s = o_.measure.budget_s / 4;
  f.rounds.assign(kFinalRounds, FinalRound(calls.size()));
  for (std::size_t round = 0; round < kFinalRounds; ++round) {
    for (std::size_t j = 0; j < calls.size(); ++j) {
      const std::size_t e = (j + round) % calls.size();
      f.rounds[round][e] = time_call(*calls[e], round_options).median_ns();
    }
  }
  return f;
}

// Writes the finals' winner to the outcome and, as this shape's recommendation, to the store.
void ShapeTuner::recommend(const Finals& finals, const FinalsVerdict& verdict) {
  const LaunchConfig& chosen = finals.configs[verdict.winner];
  out_.best_config = params_str(chosen);
  out_.best_median_ns = median_over_rounds(finals.rounds, verdict.winner);
  out_.default_median_ns = median_over_rounds(finals.rounds, 0);
  out_.gain = verdict.gain;
  out_.separated = verdict.separated;

  db::Recommendation rec;
  rec.fingerprint = run_.fp.key();
  rec.op = base_->lookup_op();
  rec.shape_key = out_.shape_key;
  rec.kernel = kernel_.name;
  rec.kernel_version = kernel_.version;
  rec.config = chosen;
  rec.median_ns = out_.best_median_ns;
  rec.gain_over_default = out_.gain;
  rec.source_run = run_.id;
  run_.store.put_recommendations({rec});
}

// This build's CPU kernels by name: replay takes a kernel's space from here.
std::map<std::string, const kernels::KernelDescriptor*> cpu_kernels_by_name(
    const extractor::Extractor& ex) {
  std::map<std::string, const kernels::KernelDescriptor*> out;
  for (const std::string& sig : ex.registry(DeviceType::kCPU).signatures()) {
    const auto* d = ex.registry(DeviceType::kCPU).find(sig).descriptor;
    out[d->name] = d;
  }
  return out;
}

// The hot-cache time of every point of `space` stored for (op, key, kernel) on device `fp`,
// nullopt for a point that did not run ok; nullopt as a whole when the sweep is incomplete.
// A point the sweep did not store ran as an earlier one with its canonical form
// (Note [Tuning a shape], 2).
std::optional<std::vector<Evaluation>> recorded_sweep(db::ResultsStore& store,
                                                      const std::string& fp, const std::string& op,
                                                      const std::string& key,
                                                      const kernels::KernelDescriptor& d,
                                                      const SearchSpace& space) {
  const auto trials = earlier_trials(store, fp, op, key, d, "hot");
  const ShapeKey shape_key = ShapeKey::parse(key);
  std::map<std::string, Evaluation> by_canonical;
  for (std::size_t i = 0; i < space.size(); ++i) {
    const auto t = trials.find(space.point(i).str());
    if (t != trials.end() && t->second) {
      by_canonical.emplace(canonical_form(d, shape_key, space.point(i)), t->second);
    }
  }
  std::vector<Evaluation> recorded(space.size());
  for (std::size_t i = 0; i < space.size(); ++i) {
    if (const auto t = trials.find(space.point(i).str()); t != trials.end()) {
      recorded[i] = t->second;
    } else if (const auto c = by_canonical.find(canonical_form(d, shape_key, space.point(i)));
               c != by_canonical.end() &&
               d.can_run(shape_key, d.complete(shape_key, space.point(i)))) {
      recorded[i] = c->second;
    } else {
      return std::nullopt;
    }
  }
  return recorded;
}

}  // namespace

LaunchConfig params_of(const LaunchConfig& config) {
  LaunchConfig p;
  for (const auto& [name, value] : config.params()) p.set(name, value);
  return p;
}

std::string params_str(const LaunchConfig& config) {
  std::string s;
  for (const auto& [name, value] : config.params()) {
    s += (s.empty() ? "" : " ") + name + "=" + std::to_string(value);
  }
  return s;
}

std::vector<ShapeOutcome> tune(const TuneOptions& o) {
  check_options(o);
  kernels::set_cpu_thread_limit(o.threads);
  TuneRun run(o);
  std::vector<ShapeOutcome> outcomes;
  try {
    for (std::size_t i = 0; i < o.shapes.size(); ++i) outcomes.push_back(ShapeTuner(run, i).tune());
  } catch (...) {
    run.store.finish_run(run.id, false);
    throw;
  }
  run.store.finish_run(run.id, true);
  return outcomes;
}

std::vector<ReplayOutcome> replay(const std::string& db_path, const std::string& strategy,
                                  std::uint64_t seed, double tolerance) {
  (void)make_strategy(strategy, seed);
  db::ResultsStore store(db_path);
  const std::string fp = cpu_fingerprint().key();
  const auto kernels_by_name = cpu_kernels_by_name(extractor::Extractor::global());
  std::vector<ReplayOutcome> out;
  auto groups = store.connection().prepare(
      "SELECT DISTINCT t.op, t.shape_key, t.kernel, t.kernel_version FROM trials t JOIN runs r "
      "ON r.id = t.run_id WHERE r.fingerprint = ?1 AND t.cache_state = 'hot' ORDER BY 1, 2, 3");
  groups.bind(1, fp);
  while (groups.step()) {
    const std::string op = groups.column_text(0);
    const std::string key = groups.column_text(1);
    const std::string kernel = groups.column_text(2);
    const auto version = static_cast<int>(groups.column_int64(3));
    const auto it = kernels_by_name.find(kernel);
    if (it == kernels_by_name.end() || it->second->version != version) continue;
    const SearchSpace space(it->second->space);
    const auto recorded = recorded_sweep(store, fp, op, key, *it->second, space);
    if (!recorded) continue;
    auto s = make_strategy(strategy, seed);
    out.push_back(
        {op, key, kernel, space.size(), evaluations_to_reach(space, *s, *recorded, tolerance)});
  }
  return out;
}

}  // namespace ka::tuner
