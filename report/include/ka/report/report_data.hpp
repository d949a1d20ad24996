// What `ka-db report` shows, read from a ka database into plain structs: runs and their
// machines, benchmark cases with ka and every reference, tuning sweeps (best so far per
// evaluation, the winner, a heatmap over two tunables) and regressions against a baseline run.
// Nothing here draws; html.cpp turns these into the page. Every loader throws ka::DbError
// naming the file when a query fails.
#pragma once

#include <ka/db/results_store.hpp>
#include <ka/db/sqlite.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ka::report {

/// One `runs` row: where, when and how the run was made (as its tool recorded it), what became
/// of it, and what it stored.
struct RunOverview {
  std::int64_t id = 0;
  std::string status;
  std::string started_at;
  std::string finished_at;  ///< Empty while running.
  db::RunInfo info;
  std::vector<std::pair<std::string, std::string>> machine;  ///< info.fingerprint_json's fields.
  std::int64_t results = 0;
  std::int64_t trials = 0;
};

/// Every run of the database, by id.
std::vector<RunOverview> load_runs(db::Connection& db);

/// One implementation (ka or a reference) of one benchmark case.
struct ImplResult {
  std::string impl;
  std::string kernel;
  std::string config;
  std::string disposition;  ///< "ok", "failed", ...
  std::string error;
  std::string cache_state;
  std::optional<double> median_ns;
  std::optional<double> stddev_ns;
  std::optional<double> gflops;
  std::optional<double> pct_peak;
  std::int64_t repetitions = 0;

  /// Half-width of the 95% confidence interval of the mean per-call time, 1.96 s / sqrt(n):
  /// the results table keeps the spread of the repetitions, not their interval.
  [[nodiscard]] std::optional<double> ci95_ns() const;
};

/// One case of a benchmark run with every implementation that ran it.
struct CaseRow {
  std::string name;
  std::string op;
  std::string shape_key;
  std::optional<double> flop;       ///< Per call; unset when not counted.
  std::optional<double> min_bytes;  ///< Per call; unset when not known.
  std::vector<ImplResult> impls;    ///< ka first, then the references as the run stored them.

  [[nodiscard]] const ImplResult* find(const std::string& impl) const;
  /// FLOP per byte; unset without both counts.
  [[nodiscard]] std::optional<double> intensity() const;
};

/// A benchmark run and its cases.
struct BenchRun {
  RunOverview run;
  std::vector<CaseRow> cases;
  std::vector<std::string> impls;  ///< "ka" first, then each reference in the order met.
};

/// The run `run_id` with its results. Throws ka::ValueError when there is no such run.
BenchRun load_bench_run(db::Connection& db, std::int64_t run_id);

/// The ids of the runs that stored benchmark results, oldest first.
std::vector<std::int64_t> runs_with_results(db::Connection& db);

/// ka against one reference on one case: reference time / ka time (> 1: ka is faster).
struct Speedup {
  std::string case_name;
  double ratio = 0.0;
};

/// The cases where both ka and `reference` ran ok, in the run's order.
std::vector<Speedup> speedups(const BenchRun& run, const std::string& reference);

/// Geometric mean of the ratios; unset when there are none.
std::optional<double> geomean(const std::vector<Speedup>& s);

/// One sweep of one shape: its run's trials in the order they were measured.
struct TuningTrace {
  std::int64_t run_id = 0;
  std::string strategy;                   ///< From the run; "unknown" for older runs.
  std::vector<double> best_so_far_ns;     ///< After each evaluation; NaN before the first ok.
};

/// What a heatmap's cells hold (Note [Heatmap slices] in report_data.cpp).
enum class HeatmapSlice {
  kAtWinner,        ///< The trial with the other tunables at the winner's values.
  kBestOverOthers,  ///< The fastest trial over every value of the other tunables.
};

/// A heatmap of median trial times over two tunables, the others at the winner's values.
struct TuningHeatmap {
  HeatmapSlice slice = HeatmapSlice::kAtWinner;
  std::string x_param;
  std::string y_param;
  std::vector<std::string> x_values;  ///< Sorted numerically where they are numbers.
  std::vector<std::string> y_values;
  std::vector<std::vector<std::optional<double>>> cells;  ///< [y][x], median ns.
  std::optional<std::pair<std::size_t, std::size_t>> winner;  ///< (y, x) of the winner's cell.
};

/// The tuning of one (op, shape, kernel) on one device.
struct TuningShape {
  std::string fingerprint;
  std::string op;
  std::string shape_key;
  std::string kernel;
  int kernel_version = 0;
  std::int64_t trials = 0;
  std::int64_t ok = 0;
  std::vector<TuningTrace> traces;
  // The recommendation stored for it, when there is one.
  std::string winner_config;
  std::optional<double> winner_median_ns;
  std::optional<double> winner_ci95_ns;  ///< From the winner's trial, when it was one.
  std::optional<double> gain_over_default;
  std::optional<double> default_median_ns;  ///< The default's, timed with the winner.
  std::optional<double> gain_low;           ///< 95% interval of the gain (schema 6 and later).
  std::optional<double> gain_high;
  std::optional<TuningHeatmap> heatmap;  ///< Unset with fewer than two varying tunables.
};

/// Which tunables the heatmaps use; empty: the two that explain most of the variance of the
/// log median time (between-group sum of squares over total).
struct HeatmapAxes {
  std::string x;
  std::string y;
};

/// Every (op, shape, kernel) tuned in `runs` (every run when empty), sorted by op and shape.
std::vector<TuningShape> load_tuning(db::Connection& db, const std::vector<std::int64_t>& runs,
                                     const HeatmapAxes& axes = {});

/// A stored trial reduced to what a heatmap needs.
struct TrialPoint {
  std::string config;  ///< LaunchConfig canonical form: "key=value" words.
  double median_ns = 0.0;
};

/// The heatmap of `trials` (ok trials only) around `winner_config`; unset with fewer than two
/// tunables that take two or more values, or when `axes` names one that does not vary.
std::optional<TuningHeatmap> heatmap_of(const std::vector<TrialPoint>& trials,
                                        const std::string& winner_config,
                                        const HeatmapAxes& axes = {});

/// One case present in both the baseline and the compared run.
struct Regression {
  std::string case_name;
  std::string impl;
  double baseline_ns = 0.0;
  double current_ns = 0.0;
  double combined_ci95_ns = 0.0;  ///< sqrt(ciA^2 + ciB^2).
  bool significant = false;       ///< |change| exceeds the threshold and combined_ci95_ns.
  bool slower = false;
};

/// Every (case, impl) both runs measured ok, in `current`'s order; significant as ka-db diff
/// classifies a change (ka::db::classify_change) with `threshold`.
std::vector<Regression> compare_runs(const BenchRun& baseline, const BenchRun& current,
                                     double threshold = 0.03);

}  // namespace ka::report
