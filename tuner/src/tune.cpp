// ka-tune's engine. See Note [Tuning a shape].
#include <ka/core/error.hpp>
#include <ka/core/fingerprint.hpp>
#include <ka/core/interrupt.hpp>
#include <ka/core/logging.hpp>
#include <ka/core/memory_limit.hpp>
#include <ka/core/option_checks.hpp>
#include <ka/core/text.hpp>
#include <ka/db/recommendation_io.hpp>
#include <ka/db/results_store.hpp>
#include <ka/db/trial_claims.hpp>
#include <ka/executor/cuda_executor.hpp>
#include <ka/extractor/extractor.hpp>
#include <ka/kernels/cpu_launch.hpp>
#include <ka/kernels/cuda_limits.hpp>
#include <ka/tuner/paired_finals.hpp>
#include <ka/tuner/search.hpp>
#include <ka/tuner/tune.hpp>

#include "shape_trials.hpp"
#include "trial_runner.hpp"

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
// 0. The space swept is the points the kernel can run for this shape here
//    (KernelDescriptor::can_run: an ISA path refuses the micro-kernel widths it lacks, a
//    skinny path the shapes it does not fit). Refused points are neither run, stored nor
//    charged to --budget: on an AVX2 host they are about half of a GEMM's space, and a sweep
//    that drew them would spend its budget and its database on nothing. The summary counts
//    them. A point whose completion throws stays in the space: its trial records why.
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
// With isolated trials (TuneOptions::isolate, ka-tune's default), what 1-3 run and time
// happens in a worker process, and this process only decides, counts and stores: see
// Note [Isolated trials] in trial_worker.cpp.

namespace {

using detail::Finals;

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

// `point`'s trial row for the shape `base` was prepared for, with what became of it.
db::TrialRow trial_row(const extractor::PreparedCall& base, const LaunchConfig& point,
                       profiler::CacheMode mode, const detail::TrialOutcome& r) {
  db::TrialRow row;
  row.op = base.lookup_op();
  row.shape_key = base.shape_key().str();
  row.kernel = base.kernel().name;
  row.kernel_version = base.kernel().version;
  row.config = point.str();
  row.cache_state = profiler::to_string(mode);
  row.disposition = r.disposition;
  row.error = r.error;
  if (r.disposition == db::Disposition::kOk) {
    row.median_ns = r.median_ns;
    row.mean_ns = r.mean_ns;
    row.min_ns = r.min_ns;
    row.max_ns = r.max_ns;
    row.stddev_ns = r.stddev_ns;
    row.ci95_ns = r.ci95_ns;
    row.repetitions = r.repetitions;
  }
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
// With `retry_failed`, trials that crashed, timed out or failed are left out (run again).
std::map<std::string, Evaluation> earlier_trials(db::ResultsStore& store, const std::string& fp,
                                                 const std::string& op, const std::string& key,
                                                 const kernels::KernelDescriptor& d,
                                                 const char* cache_state, bool retry_failed) {
  std::map<std::string, Evaluation> out;
  auto st = store.connection().prepare(
      "SELECT t.config, t.disposition, t.median_ns FROM trials t JOIN runs r ON r.id = t.run_id "
      "WHERE r.fingerprint = ?1 AND t.op = ?2 AND t.shape_key = ?3 AND t.kernel = ?4 AND "
      "t.kernel_version = ?5 AND t.cache_state = ?6 ORDER BY t.id");
  st.bind(1, fp).bind(2, op).bind(3, key).bind(4, d.name).bind(5, d.version).bind(6, cache_state);
  while (st.step()) {
    const std::string disposition = st.column_text(1);
    if (retry_failed && (disposition == "crashed" || disposition == "timeout" ||
                         disposition == "failed")) {
      continue;
    }
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

// The points of `space` that `d` can run for `shape` (Note [Tuning a shape], 0), and how many
// it refuses.
std::pair<SearchSpace, std::size_t> runnable_points(const SearchSpace& space,
                                                    const kernels::KernelDescriptor& d,
                                                    const ShapeKey& shape) {
  std::vector<std::size_t> keep;
  for (std::size_t i = 0; i < space.size(); ++i) {
    bool refused = false;
    try {
      refused = !d.can_run(shape, d.complete(shape, space.point(i)));
    } catch (const Error&) {
    }
    if (!refused) keep.push_back(i);
  }
  const std::size_t refused = space.size() - keep.size();
  return {space.subset(keep), refused};
}

// The points of `space` in slice `slice` of it for `shape` (Note [Space slices] in shards.cpp):
// those whose equivalence class is the slice's modulo the slice count, classes numbered by
// their first point. `space` holds only points the kernel can run (runnable_points); one
// whose completion throws is its own class.
SearchSpace slice_of(const SearchSpace& space, const kernels::KernelDescriptor& d,
                     const ShapeKey& shape, const ShapeSlice& slice) {
  if (slice.whole()) return space;
  KA_CHECK(slice.part < slice.parts, "slice ", slice.part, " of ", slice.parts, " does not exist");
  std::map<std::string, std::size_t> class_of;
  std::vector<std::size_t> keep;
  for (std::size_t i = 0; i < space.size(); ++i) {
    const LaunchConfig& point = space.point(i);
    std::string key = "throws:" + point.str();
    try {
      key = canonical_form(d, shape, point);
    } catch (const Error&) {
    }
    const std::size_t number = class_of.emplace(key, class_of.size()).first->second;
    if (number % slice.parts == slice.part) keep.push_back(i);
  }
  return space.subset(keep);
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
  KA_CHECK(o.slices.empty() || o.slices.size() == o.shapes.size(), o.slices.size(),
           " slices given for ", o.shapes.size(), " shapes: expected one per shape or none");
  (void)make_strategy(o.strategy, o.seed);
  const std::uint64_t memory_limit = memory_limit_bytes();
  for (const std::string& shape : o.shapes) {
    const std::uint64_t bytes = detail::shape_tensor_bytes(o.op, detail::parse_dims(o.op, shape));
    KA_CHECK(bytes <= memory_limit, "shape ", shape, " of ", o.op, " needs ", format_bytes(bytes),
             " of tensors, more than the limit of ", format_bytes(memory_limit),
             " (three quarters of the memory available now)");
  }
  KA_CHECK(o.trial_timeout_s >= 0 && std::isfinite(o.trial_timeout_s), "--trial-timeout ",
           o.trial_timeout_s, ": expected finite seconds >= 0 (0: automatic)");
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

// One call of tune(): the device's fingerprint, where trials run, and the store whose `runs`
// row is open from construction until finish_run().
struct TuneRun {
  explicit TuneRun(const TuneOptions& o)
      : options(o),
        fp(device_fingerprint(o.device)),
        trials(o.isolate ? detail::worker_trials(o) : detail::in_process_trials()),
        store(o.db_path) {
    store.record_device(fp);
    db::RunInfo info = db::run_info(fp, "ka-tune", o.command_line);
    info.suite = "";
    info.strategy = o.strategy;
    id = store.begin_run(info);
  }

  const TuneOptions& options;
  const DeviceFingerprint fp;
  const std::unique_ptr<detail::TrialRunner> trials;
  db::ResultsStore store;
  std::int64_t id = 0;
  std::size_t stored_here = 0;  // trials this process stored
};

// The claim a shape's finals are taken under (Note [Shared trials]): no LaunchConfig prints so.
constexpr const char* kFinalsClaim = "<finals>";

// One shape of a run, tuned as Note [Tuning a shape] says:
//
//   ShapeOutcome out = ShapeTuner(run, index).tune();
class ShapeTuner {
 public:
  ShapeTuner(TuneRun& run, std::size_t index);

  // Sweeps the shape, times the finalists against the default and stores the winner.
  ShapeOutcome tune() {
    if (space_.size() == 0) {
      log().info("{}: slice {} of {} holds no configuration (the space has fewer classes of "
                 "equivalent configurations than slices); nothing to do",
                 out_.shape_key, slice_.part, slice_.parts);
      out_.best_config = "(empty slice)";
      out_.separated = true;  // no finals: nothing tied
      return out_;
    }
    const History h = sweep(resume_earlier_trials());
    if (!h.best()) {
      log().warn("{}: no configuration ran correctly; nothing recommended", out_.shape_key);
      return out_;
    }
    if (adopt_concurrent_finals()) return out_;
    const std::optional<Finals> finals = time_finals(pick_finalists(h));
    if (finals) recommend(*finals, select_winner(finals->rounds));
    if (!o_.fresh) db::release_claim(run_.store.connection(), run_.id, claim_key(kFinalsClaim));
    return out_;
  }

 private:
  const extractor::PreparedCall& base() const { return local_.base(); }
  std::string canonical_of(const LaunchConfig& point) const {
    return canonical_form(kernel_, base().shape_key(), point);
  }
  History resume_earlier_trials();
  History sweep(History resumed);
  Evaluation evaluate(std::size_t i);
  std::optional<Evaluation> equivalent_result(const LaunchConfig& point) const;
  db::TrialKey claim_key(const std::string& config) const;
  db::ClaimPolicy claim_policy() const;
  std::optional<Evaluation> concurrent_result(const LaunchConfig& point);
  bool adopt_concurrent_finals();
  void count(const detail::TrialOutcome& r);
  std::vector<std::size_t> pick_finalists(const History& h) const;
  std::optional<Finals> time_finals(const std::vector<std::size_t>& finalists) const;
  void recommend(const Finals& finals, const FinalsVerdict& verdict);

  TuneRun& run_;
  const TuneOptions& o_;
  const std::size_t index_;
  // The shape built here: its default configuration, and with in-process trials its reference.
  const detail::ShapeTrials local_;
  const kernels::KernelDescriptor& kernel_;
  const ShapeSlice slice_;
  const std::pair<SearchSpace, std::size_t> runnable_;  // and the count of refused points
  const SearchSpace space_;  // this process's slice of the runnable points
  ShapeOutcome out_;
  std::map<std::string, Evaluation> by_canonical_;  // Note [Tuning a shape], 2
  bool last_equivalent_ = false;  // the last evaluation was free (not against --budget)
};

ShapeTuner::ShapeTuner(TuneRun& run, std::size_t index)
    : run_(run),
      o_(run.options),
      index_(index),
      local_(o_, index,
             o_.isolate ? detail::ShapeTrials::Use::kShapeOnly : detail::ShapeTrials::Use::kTrials),
      kernel_(local_.base().kernel()),
      slice_(index < o_.slices.size() ? o_.slices[index] : ShapeSlice{}),
      runnable_(runnable_points(SearchSpace(threads_at_most(kernel_.space, o_.threads)), kernel_,
                                base().shape_key())),
      space_(slice_of(runnable_.first, kernel_, base().shape_key(), slice_)) {
  // A slice may be empty: a space with fewer classes of configurations than slices.
  KA_CHECK(space_.size() > 0 || !slice_.whole(), kernel_.name,
           " has no configuration it can run here for ", o_.op, " at shape ", o_.shapes[index],
           " (--threads ", o_.threads, "; ", runnable_.second, " refused on this device)");
  out_.shape = o_.shapes[index];
  if (!slice_.whole()) out_.shape += fmt::format(" [{}/{}]", slice_.part, slice_.parts);
  out_.shape_key = base().shape_key().str();
  out_.kernel = kernel_.name;
  out_.space = space_.size();
  out_.refused = runnable_.second;
  run_.trials->begin_shape(index, local_);
}

// What earlier runs measured on this shape, as the history the strategy starts from: it is
// history, not work (Note [Tuning a shape], 2). With --retry-failed, configurations that
// crashed, timed out or failed are work again.
History ShapeTuner::resume_earlier_trials() {
  History resumed;
  if (o_.fresh) return resumed;
  const auto earlier =
      earlier_trials(run_.store, run_.fp.key(), base().lookup_op(), out_.shape_key, kernel_,
                     profiler::to_string(o_.measure.mode), o_.retry_failed);
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
  const auto strategy = make_strategy(o_.strategy, o_.seed, space_.find(base().default_config()));
  // A slice gets its share of the shape's budgets (Note [Space slices]).
  const std::size_t parts = slice_.parts;
  const Budget budget{o_.budget == 0 ? 0 : (o_.budget + parts - 1) / parts,
                      o_.time_budget_s / static_cast<double>(parts),
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

// The result of a configuration measured already on this shape that `point` runs exactly as
// (the same canonical form), if any. The sweep holds only points the kernel can run; one whose
// completion throws has none: its trial records why.
std::optional<Evaluation> ShapeTuner::equivalent_result(const LaunchConfig& point) const {
  try {
    const auto same = by_canonical_.find(canonical_of(point));
    if (same == by_canonical_.end()) return std::nullopt;
    return same->second;
  } catch (const Error&) {
    return std::nullopt;
  }
}

// The result of `point` as another run stored it while this one swept, waiting for a run that
// measures it now; nullopt when it is this run's to measure (claimed for it). A --fresh sweep
// shares nothing. See Note [Shared trials] in db/src/trial_claims.cpp.
std::optional<Evaluation> ShapeTuner::concurrent_result(const LaunchConfig& point) {
  if (o_.fresh) return std::nullopt;
  const db::ClaimState state =
      db::claim_or_wait(run_.store.connection(), run_.id, claim_key(point.str()), claim_policy());
  if (state.kind != db::ClaimState::Kind::kMeasured) return std::nullopt;
  return Evaluation(state.median_ns);
}

// What this shape's trials (or, with kFinalsClaim, its finals) are claimed under.
db::TrialKey ShapeTuner::claim_key(const std::string& config) const {
  db::TrialKey key;
  key.fingerprint = run_.fp.key();
  key.op = base().lookup_op();
  key.shape_key = out_.shape_key;
  key.kernel = kernel_.name;
  key.kernel_version = kernel_.version;
  key.cache_state = profiler::to_string(o_.measure.mode);
  key.config = config;
  return key;
}

db::ClaimPolicy ShapeTuner::claim_policy() const {
  db::ClaimPolicy policy;
  policy.retry_failed = o_.retry_failed;
  // A holder on another host is presumed dead well after any trial deadline it could have.
  policy.stale_after_s = std::max(policy.stale_after_s, 4.0 * o_.trial_timeout_s);
  return policy;
}

// Whether a run sweeping this shape at the same time timed the finals: waits while one does
// (it holds the finals' claim), then takes the recommendation such a run stored after this run
// began, as this shape's outcome. False (and the finals' claim held) when this run must time
// them. A --fresh sweep shares nothing. See Note [Shared trials] in db/src/trial_claims.cpp.
bool ShapeTuner::adopt_concurrent_finals() {
  if (o_.fresh) return false;
  db::Connection& db = run_.store.connection();
  const db::TrialKey key = claim_key(kFinalsClaim);
  (void)db::claim_or_wait(db, run_.id, key, claim_policy());
  auto st = db.prepare(
      "SELECT rec.config, rec.median_ns, rec.gain_over_default, rec.source_run FROM "
      "recommendations rec JOIN runs me ON me.id = ?1 WHERE rec.fingerprint = ?2 AND "
      "rec.op = ?3 AND rec.shape_key = ?4 AND rec.kernel = ?5 AND rec.kernel_version = ?6 AND "
      "rec.source_run IS NOT NULL AND rec.source_run <> ?1 AND rec.created_at >= me.started_at");
  st.bind(1, run_.id)
      .bind(2, key.fingerprint)
      .bind(3, key.op)
      .bind(4, key.shape_key)
      .bind(5, key.kernel)
      .bind(6, key.kernel_version);
  if (!st.step()) return false;
  out_.best_config = params_str(LaunchConfig::parse(st.column_text(0)));
  out_.best_median_ns = st.column_is_null(1) ? 0.0 : st.column_double(1);
  out_.gain = st.column_is_null(2) ? 1.0 : st.column_double(2);
  out_.default_median_ns = out_.best_median_ns * out_.gain;
  out_.finals_run = st.column_int64(3);
  db::release_claim(db, run_.id, key);
  return true;
}

// Point `i`'s median, or nullopt when it did not run ok. Each configuration run is stored as
// a trial with its disposition; one that runs as one measured already (same canonical form) is
// given that one's result and is neither run nor stored. A stop signal ends the sweep between
// trials (or, with isolated trials, abandons the one under way): ka::Interrupted.
Evaluation ShapeTuner::evaluate(std::size_t i) {
  if (const int sig = interrupt_signal(); sig != 0) throw Interrupted(sig);
  last_equivalent_ = false;
  const LaunchConfig& point = space_.point(i);
  if (const auto same = equivalent_result(point)) {
    ++out_.equivalent;
    last_equivalent_ = true;
    return *same;
  }
  if (const auto theirs = concurrent_result(point)) {
    ++out_.shared;
    if (*theirs) by_canonical_.emplace(canonical_of(point), *theirs);
    return *theirs;
  }
  const detail::TrialOutcome r = run_.trials->run_trial(point);
  count(r);
  Evaluation result;
  if (r.disposition == db::Disposition::kOk) {
    result = r.median_ns;
    by_canonical_.emplace(canonical_of(point), result);
  }
  run_.store.add_trials(run_.id, {trial_row(base(), point, o_.measure.mode, r)});
  stop_for_tests_after(++run_.stored_here);  // one transaction: a kill loses at most this trial
  return result;
}

void ShapeTuner::count(const detail::TrialOutcome& r) {
  ++out_.evaluated;
  switch (r.disposition) {
    case db::Disposition::kOk:
      return;
    case db::Disposition::kCrashed:
      ++out_.crashed;
      break;
    case db::Disposition::kTimeout:
      ++out_.timed_out;
      break;
    default:
      break;
  }
  ++out_.failed;
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
  std::set<std::string> taken = {canonical_of(params_of(base().default_config()))};
  for (const std::size_t j : ranked) {
    if (finalists.size() >= wanted) break;
    if (taken.insert(canonical_of(space_.point(h.points[j]))).second) {
      finalists.push_back(h.points[j]);
    }
  }
  return finalists;
}

// The default configuration (candidate 0; it need not be a point of the space: heuristics
// pick shape-specific tiles) and the finalists the kernel accepts, timed in paired rounds
// (ShapeTrials::time_finals) where the trials run.
std::optional<Finals> ShapeTuner::time_finals(const std::vector<std::size_t>& finalists) const {
  if (const int sig = interrupt_signal(); sig != 0) throw Interrupted(sig);
  std::vector<LaunchConfig> points;
  for (const std::size_t p : finalists) points.push_back(space_.point(p));
  return run_.trials->time_finals(points);
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
  rec.op = base().lookup_op();
  rec.shape_key = out_.shape_key;
  rec.kernel = kernel_.name;
  rec.kernel_version = kernel_.version;
  rec.config = chosen;
  rec.median_ns = out_.best_median_ns;
  rec.gain_over_default = out_.gain;
  rec.default_median_ns = out_.default_median_ns;
  rec.gain_low = verdict.gain_low;
  rec.gain_high = verdict.gain_high;
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
// (Note [Tuning a shape], 2). `space` holds only points the kernel can run (runnable_points).
std::optional<std::vector<Evaluation>> recorded_sweep(db::ResultsStore& store,
                                                      const std::string& fp, const std::string& op,
                                                      const std::string& key,
                                                      const kernels::KernelDescriptor& d,
                                                      const SearchSpace& space) {
  const auto trials = earlier_trials(store, fp, op, key, d, "hot", /*retry_failed=*/false);
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
               c != by_canonical.end()) {
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

std::string params_str(const LaunchConfig& config) { return config.params_str(); }

std::vector<ShapeOutcome> tune(const TuneOptions& o) {
  check_options(o);
  kernels::set_cpu_thread_limit(o.threads);
  const InterruptScope stop_on_signal;
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
    const SearchSpace space =
        runnable_points(SearchSpace(it->second->space), *it->second, ShapeKey::parse(key)).first;
    const auto recorded = recorded_sweep(store, fp, op, key, *it->second, space);
    if (!recorded) continue;
    auto s = make_strategy(strategy, seed);
    out.push_back(
        {op, key, kernel, space.size(), evaluations_to_reach(space, *s, *recorded, tolerance)});
  }
  return out;
}

}  // namespace ka::tuner
