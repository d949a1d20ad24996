// ka-tune --fusion: measured fusion decisions. See harness/include/ka/harness/fusion_tune.hpp.
#include "graph_case.hpp"

#include <ka/core/error.hpp>
#include <ka/core/fingerprint.hpp>
#include <ka/core/interrupt.hpp>
#include <ka/db/recommendation_io.hpp>
#include <ka/db/results_store.hpp>
#include <ka/harness/fusion_tune.hpp>
#include <ka/harness/suite.hpp>

#include <fmt/format.h>

#include <regex>

namespace ka::harness {

namespace {
LaunchConfig params_only(const std::string& text) {
  const LaunchConfig full = LaunchConfig::parse(text);
  LaunchConfig p;
  for (const auto& [name, value] : full.params()) p.set(name, value);
  return p;
}
}  // namespace

int tune_fusion(const FusionTuneOptions& o) {
  const Suite suite = o.model.empty() ? load_suite_file(find_suite_file(o.suite, o.suites_dir))
                                      : model_suite(o.model, o.model_inputs);
  const std::regex filter = detail::case_filter(o.filter, "--filter");
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
      const auto t = g.time_fusion(o.measure);
      const bool faster = t.fused.median_ci95.high < t.unfused.median_ci95.low;
      const bool slower = t.fused.median_ci95.low > t.unfused.median_ci95.high;
      const std::string decision = slower ? "unfused" : "fused";
      std::vector<db::Recommendation> rows;
      std::string patterns;
      for (const detail::TaskInfo& task : t.plan.tasks) {
        if (task.pattern.rfind("fused::", 0) != 0) continue;
        db::Recommendation r;
        r.fingerprint = fp.key();
        r.op = task.pattern.substr(0, task.pattern.find('['));
        r.shape_key = task.shape_key;
        r.kernel = task.kernel;
        r.kernel_version = task.kernel_version;
        r.config = params_only(task.config);
        r.fusion = decision;
        r.median_ns = t.fused.median_ns();
        r.gain_over_default = t.unfused.median_ns() / t.fused.median_ns();
        r.source_run = run;
        rows.push_back(std::move(r));
        patterns += (patterns.empty() ? "" : ", ") + task.pattern;
      }
      if (!rows.empty()) store.put_recommendations(rows);
      fmt::print(o.out, "{:<26} {:>12} {:>12} {:>7.2f}x  {:<9} {}\n", c.name,
                 profiler::format_duration_ns(t.fused.median_ns()),
                 profiler::format_duration_ns(t.unfused.median_ns()),
                 t.unfused.median_ns() / t.fused.median_ns(),
                 rows.empty() ? "-" : (faster || slower ? decision : decision + "?"),
                 rows.empty() ? "(nothing fuses)" : patterns);
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
