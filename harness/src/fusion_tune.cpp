// ka-tune --fusion: measured fusion decisions. See harness/include/ka/harness/fusion_tune.hpp.
#include "graph_case.hpp"

#include <ka/core/error.hpp>
#include <ka/core/fingerprint.hpp>
#include <ka/core/interrupt.hpp>
#include <ka/db/recommendation_io.hpp>
#include <ka/db/results_store.hpp>
#include <ka/extractor/extractor.hpp>
#include <ka/harness/fusion_tune.hpp>
#include <ka/harness/suite.hpp>
#include <ka/kernels/cpu_launch.hpp>
#include <ka/profiler/statistics.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <regex>
#include <set>

namespace ka::harness {

namespace {
LaunchConfig params_only(const std::string& text) {
  const LaunchConfig full = LaunchConfig::parse(text);
  LaunchConfig p;
  for (const auto& [name, value] : full.params()) p.set(name, value);
  return p;
}
// Note [Sweeping a fused kernel]
// A fused pattern whose kernel serves only fused patterns (its descriptor's ops are all
// fused::*, as attention's) is reached by no `ka-tune --op`, so ka-tune --fusion sweeps its
// space where it runs: inside its graph. Each point that can run the task's shape (one per
// canonical form, threads within the thread limit) becomes the table's row for (pattern,
// shape key) and the whole graph is timed fused with it, on a quarter of the decision's
// budget. The fastest point and the heuristic's config are then timed again alternately,
// kFinalRounds times each, and the fastest is kept only when it was faster in at least
// kFinalWins of those paired rounds (a sign test: 4 of 5 by chance has probability 3/16):
// one lucky sample does not replace the heuristic, nor does a tie.
// The sweep comes before the fusion decision, and when it kept a config of its own the graph
// is timed fused again with the kept configs: the decision weighs the tuned fused kernel
// against the unfused ops, not the heuristic's. (Deciding first, a fused kernel that lost
// with its heuristic config was never tuned, on a machine the heuristic does not suit.)
constexpr int kFinalRounds = 5;
constexpr int kFinalWins = 4;

struct SweptConfig {
  LaunchConfig config;  ///< The kept config (the heuristic's when nothing beat it).
  std::size_t points = 0;
  double median_ns = 0.0;   ///< Graph time with it, over the final rounds.
  double default_ns = 0.0;  ///< With the heuristic's, over the same rounds.
};

// The descriptor of `task`'s kernel when it exists only fused (see the Note); else null.
const kernels::KernelDescriptor* fused_only_kernel(const std::string& pattern) {
  const extractor::KernelEntry* entry =
      extractor::Extractor::global().registry(DeviceType::kCPU).find_exact(pattern);
  if (entry == nullptr) return nullptr;
  const kernels::KernelDescriptor* d = entry->descriptor;
  const bool fused_only = !d->ops.empty() && std::all_of(d->ops.begin(), d->ops.end(), [](const std::string& op) {
    return op.rfind("fused::", 0) == 0;
  });
  return fused_only ? d : nullptr;
}

// The points of d's space worth timing for `key`: runnable, one per canonical form, on at
// most the thread limit.
std::vector<LaunchConfig> sweep_points(const kernels::KernelDescriptor& d, const ShapeKey& key) {
  std::set<std::string> seen;
  std::vector<LaunchConfig> points;
  for (const LaunchConfig& p : d.space.enumerate()) {
    if (p.get_or("threads", 1) > kernels::cpu_thread_limit()) continue;
    if (!d.can_run(key, d.complete(key, p))) continue;
    const std::string canonical = d.canonical ? d.canonical(key, p).str() : p.str();
    if (seen.insert(canonical).second) points.push_back(p);
  }
  return points;
}

// A table of `rows`, each fused with its config, for timing a graph with them.
std::shared_ptr<const db::RecommendationTable> fused_table(const DeviceFingerprint& fp,
                                                           std::vector<db::Recommendation> rows) {
  for (db::Recommendation& r : rows) r.fusion = "fused";
  return std::make_shared<const db::RecommendationTable>(
      fp.key(), std::move(rows), extractor::Extractor::global().kernel_versions());
}

SweptConfig sweep_fused_kernel(detail::GraphCase& g, const detail::TaskInfo& task,
                               const std::string& pattern, const kernels::KernelDescriptor& d,
                               const DeviceFingerprint& fp, const profiler::MeasureOptions& m) {
  const ShapeKey key = ShapeKey::parse(task.shape_key);
  const auto table_with = [&](const LaunchConfig& config) {
    db::Recommendation r;
    r.fingerprint = fp.key();
    r.op = pattern;
    r.shape_key = task.shape_key;
    r.kernel = d.name;
    r.kernel_version = d.version;
    r.config = config;
    return fused_table(fp, {r});
  };
  profiler::MeasureOptions quick = m;
  quick.budget_s = m.budget_s / 4;
  SweptConfig out;
  const std::vector<LaunchConfig> points = sweep_points(d, key);
  out.points = points.size();
  std::optional<LaunchConfig> best;
  double best_ns = 0.0;
  for (const LaunchConfig& p : points) {
    const double ns = g.time_fused_with(table_with(p), quick).median_ns();
    if (!best || ns < best_ns) {
      best = p;
      best_ns = ns;
    }
  }
  const LaunchConfig heuristic = params_only(task.config);
  out.config = heuristic;
  if (!best) return out;
  std::vector<double> with_best;
  std::vector<double> with_default;
  for (int r = 0; r < kFinalRounds; ++r) {
    with_default.push_back(g.time_fused_with(table_with(heuristic), quick).median_ns());
    with_best.push_back(g.time_fused_with(table_with(*best), quick).median_ns());
  }
  int wins = 0;
  for (std::size_t r = 0; r < with_best.size(); ++r) wins += with_best[r] < with_default[r] ? 1 : 0;
  out.default_ns = profiler::summarize(with_default).median;
  out.median_ns = profiler::summarize(with_best).median;
  if (wins >= kFinalWins && out.median_ns < out.default_ns) {
    out.config = *best;
  } else {
    out.median_ns = out.default_ns;
  }
  return out;
}

}  // namespace

int tune_fusion(const FusionTuneOptions& o) {
  const Suite suite = o.model.empty() ? load_suite_file(find_suite_file(o.suite, o.suites_dir))
                                      : model_suite(o.model, o.model_inputs);
  const std::regex filter = detail::case_filter(o.filter, "--filter");
  // As ka-bench: otherwise every unfused call page-faults its large intermediates in again
  // (12 x 1024 x 1024 scores: 48 MiB each) and the decision measures the kernel's allocator.
  const std::string allocator = detail::keep_freed_memory();
  const DeviceFingerprint fp = cpu_fingerprint();
  db::ResultsStore store(o.db_path);
  store.record_device(fp);
  db::RunInfo info = db::cpu_run_info("ka-tune", o.command_line);
  info.suite = suite.name;
  const std::int64_t run = store.begin_run(info);
  fmt::print(o.out,
             "ka-tune --fusion: suite '{}'; each graph timed fused and unfused (median, CI95 "
             "target {:.1f}%, hot cache); decisions go to {}\n",
             suite.name, 100 * o.measure.target_rel_ci95, o.db_path);
  if (!allocator.empty()) fmt::print(o.out, "({})\n", allocator);
  fmt::print(o.out, "{:<26} {:>12} {:>12} {:>8}  {:<9} {}\n", "case", "fused", "unfused", "gain",
             "decision", "patterns");
  bool ok = true;
  int cases = 0;
  const InterruptScope stop_on_signal;
  for (std::size_t i = 0; i < suite.cases.size(); ++i) {
    const SuiteCase& c = suite.cases[i];
    if (!c.is_graph() || !std::regex_search(c.name, filter)) continue;
    if (const int sig = interrupt_signal(); sig != 0) {  // the case under way has finished
      store.finish_run(run, false);
      throw Interrupted(sig);
    }
    ++cases;
    try {
      detail::GraphCase g(c, 20261130 + i);
      auto t = g.time_fusion(o.measure);
      std::vector<db::Recommendation> rows;
      std::vector<std::string> sweeps;
      std::string patterns;
      bool retuned = false;  // a sweep kept a config other than the heuristic's
      for (const detail::TaskInfo& task : t.plan.tasks) {
        if (task.pattern.rfind("fused::", 0) != 0) continue;
        db::Recommendation r;
        r.fingerprint = fp.key();
        r.op = task.pattern.substr(0, task.pattern.find('['));
        r.shape_key = task.shape_key;
        r.kernel = task.kernel;
        r.kernel_version = task.kernel_version;
        r.config = params_only(task.config);
        if (const kernels::KernelDescriptor* d = fused_only_kernel(r.op)) {
          const SweptConfig s = sweep_fused_kernel(g, task, r.op, *d, fp, o.measure);
          retuned = retuned || s.config.params_str() != r.config.params_str();
          r.config = s.config;
          sweeps.push_back(fmt::format(
              "  {}: swept {} configs of {} in the graph; kept {} ({} vs {} with the "
              "heuristic's, medians of {} paired rounds)",
              r.op, s.points, d->name, s.config.params_str(),
              profiler::format_duration_ns(s.median_ns),
              profiler::format_duration_ns(s.default_ns), kFinalRounds));
        }
        r.source_run = run;
        rows.push_back(std::move(r));
        patterns += (patterns.empty() ? "" : ", ") + task.pattern;
      }
      // The decision weighs the fused kernels as tuned (Note [Sweeping a fused kernel]).
      if (retuned) t.fused = g.time_fused_with(fused_table(fp, rows), o.measure);
      const bool faster = t.fused.median_ci95.high < t.unfused.median_ci95.low;
      const bool slower = t.fused.median_ci95.low > t.unfused.median_ci95.high;
      const std::string decision = slower ? "unfused" : "fused";
      for (db::Recommendation& r : rows) {
        r.fusion = decision;
        r.median_ns = t.fused.median_ns();
        r.gain_over_default = t.unfused.median_ns() / t.fused.median_ns();
      }
      if (!rows.empty()) store.put_recommendations(rows);
      fmt::print(o.out, "{:<26} {:>12} {:>12} {:>7.2f}x  {:<9} {}\n", c.name,
                 profiler::format_duration_ns(t.fused.median_ns()),
                 profiler::format_duration_ns(t.unfused.median_ns()),
                 t.unfused.median_ns() / t.fused.median_ns(),
                 rows.empty() ? "-" : (faster || slower ? decision : decision + "?"),
                 rows.empty() ? "(nothing fuses)" : patterns);
      for (const std::string& line : sweeps) fmt::print(o.out, "{}\n", line);
    } catch (const std::exception& e) {
      fmt::print(o.out, "{:<26} FAILED: {}\n", c.name, e.what());
      ok = false;
    }
  }
  store.finish_run(run, ok);
  KA_CHECK(cases > 0, "suite '", suite.name, "' has no graph case",
           o.filter.empty() ? "" : " matching the filter");
  fmt::print(o.out, "(gain = unfused / fused median; \"fused?\": the intervals overlap, so the "
                    "rule (fuse) stands)\n");
  return ok ? 0 : 1;
}

}  // namespace ka::harness
