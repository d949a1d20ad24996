// What ka-db report reads and draws, on databases written through ResultsStore (the writer
// ka-bench and ka-tune use): each figure comes back from the rows it names, and the page has
// one mark per drawable row.
#include <ka/core/error.hpp>
#include <ka/core/launch_config.hpp>
#include <ka/db/results_store.hpp>
#include <ka/db/schema.hpp>
#include <ka/report/html.hpp>
#include <ka/report/report_data.hpp>

#include "scratch_dir.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <regex>
#include <string>
#include <vector>

namespace ka::report {
namespace {

using db::Disposition;
using db::ResultRow;
using db::TrialRow;

const std::string kShape = "aten::mm(f32[64,64]c,f32[64,64]c)";
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

ResultRow result(const std::string& name, const std::string& impl, std::optional<double> median,
                 Disposition d = Disposition::kOk) {
  ResultRow r;
  r.suite = "smoke";
  r.case_name = name;
  r.impl = impl;
  r.benchmark_name = "smoke/" + name + "/" + impl;
  r.op = "aten::mm";
  r.shape_key = kShape;
  r.dtype = "float32";
  r.disposition = d;
  r.repetitions = 5;
  r.median_ns = median;
  r.stddev_ns = median ? std::optional<double>(*median * 0.01) : std::nullopt;
  r.flop = 2.0 * 64 * 64 * 64;
  r.min_bytes = 4.0 * 3 * 64 * 64;
  if (median) r.gflops = *r.flop / *median;
  return r;
}

std::string config(int tile_m, int tile_n, int threads) {
  return "grid=1x1x1 block=1x1x1 threads=" + std::to_string(threads) +
         " tile_m=" + std::to_string(tile_m) + " tile_n=" + std::to_string(tile_n);
}

TrialRow trial(const std::string& cfg, std::optional<double> median,
               Disposition d = Disposition::kOk) {
  TrialRow t;
  t.op = "aten::mm";
  t.shape_key = kShape;
  t.kernel = "gemm_f32_blocked";
  t.kernel_version = 6;
  t.config = cfg;
  t.disposition = d;
  t.median_ns = median;
  t.ci95_ns = median ? std::optional<double>(*median * 0.02) : std::nullopt;
  t.repetitions = 7;
  return t;
}

// This machine's recommendation of `cfg` for the trials' shape and kernel.
db::Recommendation recommendation(const std::string& cfg, double median_ns) {
  db::Recommendation rec;
  rec.fingerprint = cpu_fingerprint().key();
  rec.op = "aten::mm";
  rec.shape_key = kShape;
  rec.kernel = "gemm_f32_blocked";
  rec.kernel_version = 6;
  rec.config = LaunchConfig::parse(cfg);
  rec.median_ns = median_ns;
  return rec;
}

// Time model of the trials: tile_m matters most, tile_n some, threads not at all.
double model_ns(int tile_m, int tile_n) { return 1000.0 * tile_m + 100.0 * tile_n; }

// Count of `needle` in `haystack`.
std::size_t count(const std::string& haystack, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

// The <svg ...data-plot="id"...>...</svg> element of `page`.
std::string plot(const std::string& page, const std::string& id) {
  const auto at = page.find("data-plot=\"" + id + "\"");
  if (at == std::string::npos) return "";
  const auto start = page.rfind("<svg", at);
  const auto end = page.find("</svg>", at);
  return page.substr(start, end - start);
}

class ReportDataTest : public ::testing::Test {
 protected:
  // A bench run (3 cases: one ka failure, one where ka is slower) and a tuning run whose
  // sweep tried every (tile_m, tile_n) at threads=1 and a few at threads=2.
  void SetUp() override {
    db::ResultsStore store(dir_.path("ka.db"));
    db::RunInfo bench = db::cpu_run_info("ka-bench", "ka-bench --suite smoke");
    bench.suite = "smoke";
    bench.threads = 2;
    bench.fma_peak_gflops = 200.0;
    bench.read_gbps = 25.0;
    bench_ = store.begin_run(bench);
    store.add_results(bench_, {result("fast", "libtorch", 2000.0), result("fast", "ka", 1000.0),
                               result("slow", "ka", 4000.0), result("slow", "libtorch", 2000.0),
                               result("broken", "ka", std::nullopt, Disposition::kFailed),
                               result("broken", "libtorch", 500.0)});
    store.finish_run(bench_, true);

    db::RunInfo tune = db::cpu_run_info("ka-tune", "ka-tune --op aten::mm");
    tune.strategy = "exhaustive";
    tune_ = store.begin_run(tune);
    std::vector<TrialRow> trials = {trial(config(8, 8, 1), std::nullopt, Disposition::kFailed)};
    for (const int m : {16, 8, 4}) {
      for (const int n : {32, 16}) trials.push_back(trial(config(m, n, 1), model_ns(m, n)));
    }
    trials.push_back(trial(config(4, 16, 2), model_ns(4, 16) * 1.01));
    store.add_trials(tune_, trials);
    db::Recommendation rec = recommendation(config(4, 16, 1), model_ns(4, 16));
    rec.gain_over_default = 1.8;
    rec.default_median_ns = model_ns(4, 16) * 1.8;
    rec.gain_low = 1.7;
    rec.gain_high = 1.9;
    rec.source_run = tune_;
    store.record_device(cpu_fingerprint());
    store.put_recommendations({rec});
    store.finish_run(tune_, true);
  }

  db::Connection open() { return db::open_for_reading(dir_.path("ka.db")); }

  test::ScratchDir dir_;
  std::int64_t bench_ = 0;
  std::int64_t tune_ = 0;
};

TEST_F(ReportDataTest, RunsCarryTheirProbesAndStrategy) {
  db::Connection db = open();
  const std::vector<RunOverview> runs = load_runs(db);
  ASSERT_EQ(runs.size(), 2U);
  EXPECT_EQ(runs[0].id, bench_);
  EXPECT_EQ(runs[0].results, 6);
  EXPECT_EQ(runs[0].info.threads, 2);
  ASSERT_TRUE(runs[0].info.read_gbps.has_value());
  EXPECT_DOUBLE_EQ(*runs[0].info.read_gbps, 25.0);
  EXPECT_FALSE(runs[0].info.copy_gbps.has_value());
  EXPECT_TRUE(runs[0].info.strategy.empty());
  EXPECT_FALSE(runs[0].machine.empty());
  EXPECT_EQ(runs[1].info.strategy, "exhaustive");
  EXPECT_EQ(runs[1].trials, 8);
}

TEST_F(ReportDataTest, BenchRunListsKaFirstWithIntensityAndSpeedups) {
  db::Connection db = open();
  const BenchRun b = load_bench_run(db, bench_);
  ASSERT_EQ(b.cases.size(), 3U);
  EXPECT_EQ(b.impls, (std::vector<std::string>{"ka", "libtorch"}));
  EXPECT_EQ(b.cases[0].name, "fast");
  EXPECT_EQ(b.cases[0].impls[0].impl, "ka");  // stored after libtorch, listed first
  ASSERT_TRUE(b.cases[0].intensity().has_value());
  EXPECT_NEAR(*b.cases[0].intensity(), 2.0 * 64 / (4.0 * 3), 1e-12);
  EXPECT_EQ(b.cases[2].find("ka")->disposition, "failed");

  const std::vector<Speedup> s = speedups(b, "libtorch");
  ASSERT_EQ(s.size(), 2U);  // the failed case has no ratio
  EXPECT_DOUBLE_EQ(s[0].ratio, 2.0);
  EXPECT_DOUBLE_EQ(s[1].ratio, 0.5);
  EXPECT_NEAR(*geomean(s), 1.0, 1e-12);
  EXPECT_FALSE(geomean({}).has_value());
  EXPECT_THROW(load_bench_run(db, 99), ValueError);
}

TEST_F(ReportDataTest, TuningTracesAreBestSoFarInTrialOrder) {
  db::Connection db = open();
  const std::vector<TuningShape> shapes = load_tuning(db, {});
  ASSERT_EQ(shapes.size(), 1U);
  const TuningShape& t = shapes[0];
  EXPECT_EQ(t.trials, 8);
  EXPECT_EQ(t.ok, 7);
  ASSERT_EQ(t.traces.size(), 1U);
  EXPECT_EQ(t.traces[0].strategy, "exhaustive");
  const std::vector<double>& best = t.traces[0].best_so_far_ns;
  ASSERT_EQ(best.size(), 8U);
  EXPECT_TRUE(std::isnan(best[0]));  // the first trial failed
  EXPECT_DOUBLE_EQ(best[1], model_ns(16, 32));
  EXPECT_DOUBLE_EQ(best[2], model_ns(16, 16));
  EXPECT_DOUBLE_EQ(best[6], model_ns(4, 16));
  EXPECT_DOUBLE_EQ(best[7], model_ns(4, 16));  // the slower threads=2 trial changes nothing
  EXPECT_EQ(t.winner_config, config(4, 16, 1));
  ASSERT_TRUE(t.gain_over_default.has_value());
  EXPECT_DOUBLE_EQ(*t.gain_over_default, 1.8);
  ASSERT_TRUE(t.gain_low.has_value() && t.gain_high.has_value() && t.default_median_ns);
  EXPECT_DOUBLE_EQ(*t.gain_low, 1.7);
  EXPECT_DOUBLE_EQ(*t.gain_high, 1.9);
  EXPECT_DOUBLE_EQ(*t.default_median_ns, model_ns(4, 16) * 1.8);
  ASSERT_TRUE(t.winner_ci95_ns.has_value());
  EXPECT_DOUBLE_EQ(*t.winner_ci95_ns, model_ns(4, 16) * 0.02);
  // Only the bench run selected: no trials.
  EXPECT_TRUE(load_tuning(db, {bench_}).empty());
}

TEST_F(ReportDataTest, HeatmapTakesTheTwoTunablesThatExplainMostVariance) {
  db::Connection db = open();
  const std::vector<TuningShape> shapes = load_tuning(db, {});
  ASSERT_TRUE(shapes.at(0).heatmap.has_value());
  const TuningHeatmap& h = *shapes[0].heatmap;
  EXPECT_EQ(h.x_param, "tile_m");
  EXPECT_EQ(h.y_param, "tile_n");
  EXPECT_EQ(h.x_values, (std::vector<std::string>{"4", "8", "16"}));  // numeric order
  EXPECT_EQ(h.y_values, (std::vector<std::string>{"16", "32"}));
  EXPECT_EQ(h.slice, HeatmapSlice::kAtWinner);
  ASSERT_TRUE(h.winner.has_value());
  EXPECT_EQ(*h.winner, std::make_pair(std::size_t{0}, std::size_t{0}));
  // threads=1 everywhere (the winner's): the threads=2 trial is not in any cell.
  EXPECT_DOUBLE_EQ(*h.cells[0][0], model_ns(4, 16));
  EXPECT_DOUBLE_EQ(*h.cells[1][2], model_ns(16, 32));
}

TEST(Heatmap, AxesTheUserNamesAndTheSparseSliceFallback) {
  std::vector<TrialPoint> trials;
  for (const int m : {4, 8}) {
    for (const int n : {16, 32}) {
      for (const int th : {1, 2}) {
        trials.push_back({config(m, n, th), model_ns(m, n) + th});
      }
    }
  }
  const auto h = heatmap_of(trials, config(4, 16, 1), {"threads", "tile_m"});
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->x_param, "threads");
  EXPECT_EQ(h->y_param, "tile_m");
  EXPECT_EQ(h->slice, HeatmapSlice::kAtWinner);
  EXPECT_FALSE(heatmap_of(trials, "", {"threads", "nonexistent"}).has_value());
  EXPECT_FALSE(heatmap_of(trials, "", {"tile_m", "tile_m"}).has_value());

  // A sampled sweep: no two trials differ on the axes only. Each cell is then the best over
  // the other tunables, and says so.
  const std::vector<TrialPoint> sparse = {{config(4, 16, 1), 10.0},
                                          {config(8, 32, 2), 20.0},
                                          {config(8, 16, 3), 30.0},
                                          {config(4, 32, 4), 40.0}};
  const auto s = heatmap_of(sparse, config(4, 16, 1), {"tile_m", "tile_n"});
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->slice, HeatmapSlice::kBestOverOthers);
  EXPECT_DOUBLE_EQ(*s->cells[1][1], 20.0);

  // One varying tunable, NaN and negative times: no heatmap, no exception.
  EXPECT_FALSE(heatmap_of({{config(4, 16, 1), 1.0}, {config(8, 16, 1), 2.0}}, "").has_value());
  EXPECT_FALSE(heatmap_of({{config(4, 16, 1), kNaN}, {config(8, 32, 2), -1.0}}, "").has_value());
  EXPECT_FALSE(heatmap_of({}, "").has_value());
}

TEST_F(ReportDataTest, RegressionsNeedTheThresholdAndTheCombinedInterval) {
  {
    db::ResultsStore store(dir_.path("ka.db"));
    const std::int64_t again = store.begin_run(db::cpu_run_info("ka-bench", "again"));
    // fast: 50% slower (significant); slow: 0.5% faster (within the threshold).
    store.add_results(again, {result("fast", "ka", 1500.0), result("slow", "ka", 3980.0),
                              result("fast", "libtorch", 2000.0)});
    store.finish_run(again, true);
  }
  db::Connection db = open();
  const BenchRun base = load_bench_run(db, bench_);
  const BenchRun now = load_bench_run(db, bench_ + 2);
  const std::vector<Regression> r = compare_runs(base, now);
  ASSERT_EQ(r.size(), 3U);
  EXPECT_EQ(r[0].case_name, "fast");
  EXPECT_TRUE(r[0].significant);
  EXPECT_TRUE(r[0].slower);
  EXPECT_FALSE(r[1].significant);  // slow: -0.5%
  EXPECT_FALSE(r[2].significant);  // libtorch unchanged
  EXPECT_GT(r[0].combined_ci95_ns, 0.0);

  ReportOptions o;
  o.db_label = "ka.db";
  o.runs = {bench_ + 2};
  o.baseline = bench_;
  ReportCounts counts;
  const std::string page = render_report(db, o, counts);
  EXPECT_EQ(counts.regressions, 1U);
  EXPECT_EQ(count(plot(page, "regressions"), "class=\"mark bar low\""), 1U);
  EXPECT_EQ(count(plot(page, "regressions"), "class=\"mark"), 3U);
}

TEST_F(ReportDataTest, PageHasOneMarkPerDrawableRow) {
  db::Connection db = open();
  ReportOptions o;
  o.db_label = "<ka.db>";
  ReportCounts counts;
  const std::string page = render_report(db, o, counts);
  EXPECT_EQ(counts.bench_runs, 1U);
  EXPECT_EQ(counts.cases, 3U);
  EXPECT_EQ(counts.tuned_shapes, 1U);
  // Roofline: 5 ok results with counts (the failed ka result is not drawn).
  const std::string roofline = plot(page, "roofline-" + std::to_string(bench_));
  EXPECT_EQ(count(roofline, "class=\"mark"), 5U);
  EXPECT_EQ(count(roofline, "class=\"roof\""), 1U);
  // Speed-ups: 2 bars, the slower case highlighted.
  const std::string bars = plot(page, "speedup-" + std::to_string(bench_) + "-libtorch");
  EXPECT_EQ(count(bars, "class=\"mark"), 2U);
  EXPECT_EQ(count(bars, "class=\"mark bar low\""), 1U);
  EXPECT_NE(bars.find("geomean 1.00x"), std::string::npos);
  EXPECT_NE(page.find("1.80x [1.70, 1.90]"), std::string::npos);
  // Tuning: one line per run, one cell per measured (tile_m, tile_n) at threads=1.
  EXPECT_EQ(count(plot(page, "tuning-0"), "class=\"mark"), 1U);
  EXPECT_EQ(count(plot(page, "heatmap-0"), "class=\"mark"), 6U);
  // Self-contained and escaped.
  EXPECT_EQ(page.find("http://"), page.find("http://www.w3.org/2000/svg"));
  EXPECT_EQ(page.find("https://"), std::string::npos);
  EXPECT_EQ(page.find("<ka.db>"), std::string::npos);
  EXPECT_NE(page.find("&lt;ka.db&gt;"), std::string::npos);
  EXPECT_EQ(count(page, "<script>"), 1U);
  EXPECT_THROW(render_report(db, {"ka.db", {42}, std::nullopt, {}, 0.03, 40}), ValueError);
}

TEST(ReportHeatmap, AWinnerWithoutATrialOfItsOwnIsOutlinedAndExplained) {
  // The sweep timed the winner as an equivalent configuration measured before it, so no trial
  // has the winner's (tile_m, tile_n): its cell is empty, outlined, and the page says why.
  test::ScratchDir dir;
  {
    db::ResultsStore store(dir.path("ka.db"));
    const std::int64_t run = store.begin_run(db::cpu_run_info("ka-tune", "ka-tune"));
    store.add_trials(run, {trial(config(4, 16, 1), 50.0), trial(config(4, 32, 1), 60.0),
                           trial(config(8, 16, 1), 70.0)});
    const db::Recommendation rec = recommendation(config(8, 32, 1), 50.0);
    store.record_device(cpu_fingerprint());
    store.put_recommendations({rec});
    store.finish_run(run, true);
  }
  db::Connection db = db::open_for_reading(dir.path("ka.db"));
  const std::vector<TuningShape> shapes = load_tuning(db, {});
  ASSERT_EQ(shapes.size(), 1U);
  ASSERT_TRUE(shapes[0].heatmap && shapes[0].heatmap->winner);
  const auto [y, x] = *shapes[0].heatmap->winner;
  EXPECT_FALSE(shapes[0].heatmap->cells[y][x].has_value());
  ReportOptions o;
  o.db_label = "ka.db";
  const std::string page = render_report(db, o);
  EXPECT_NE(page.find("holds no trial"), std::string::npos);
  EXPECT_EQ(count(plot(page, "heatmap-0"), "class=\"mark"), 3U);
}

TEST(ReportOlderSchema, ADatabaseBeforeSchema6ReadsWithoutTheNewColumns) {
  test::ScratchDir dir;
  {
    db::Connection db(dir.path("old.db"));
    db::detail::migrate_to(db, 5);
    db.exec(
        "INSERT INTO runs (started_at, status, tool, command_line, host, ka_version, git_sha, "
        "device, fingerprint, fingerprint_json, threads) VALUES ('2026-01-01T00:00:00Z', "
        "'complete', 'ka-bench', 'ka-bench', 'h', '0.1', 'abc', 'cpu', 'cpu|x', 'not json', 1)");
    db.exec(
        "INSERT INTO results (run_id, suite, case_name, impl, benchmark_name, op, shape_key, "
        "dtype, disposition, median_ns, gflops) VALUES (1, 's', 'c', 'ka', 's/c/ka', 'aten::mm', "
        "'k', 'float32', 'ok', 10.0, 5.0)");
  }
  db::Connection db = db::open_for_reading(dir.path("old.db"));
  const BenchRun b = load_bench_run(db, 1);
  ASSERT_EQ(b.cases.size(), 1U);
  EXPECT_FALSE(b.cases[0].intensity().has_value());
  EXPECT_FALSE(b.run.info.copy_gbps.has_value());
  EXPECT_TRUE(b.run.machine.empty());  // malformed fingerprint JSON: no fields, no throw
  ReportOptions o;
  o.db_label = "old.db";
  const std::string page = render_report(db, o);
  EXPECT_EQ(count(plot(page, "roofline-1"), "class=\"mark"), 0U);
  EXPECT_NE(page.find("No trials"), std::string::npos);
}

TEST(ReportScale, TenThousandTrialsRenderQuickly) {
  test::ScratchDir dir;
  {
    db::ResultsStore store(dir.path("big.db"));
    const std::int64_t run = store.begin_run(db::cpu_run_info("ka-tune", "big"));
    std::vector<TrialRow> trials;
    for (int i = 0; i < 10000; ++i) {
      trials.push_back(trial(config(4 + i % 100, 8 + i / 100, 1 + i % 3),
                             i % 97 == 0 ? std::optional<double>() : 1000.0 + i % 313));
    }
    store.add_trials(run, trials);
    store.finish_run(run, true);
  }
  db::Connection db = db::open_for_reading(dir.path("big.db"));
  const auto start = std::chrono::steady_clock::now();
  ReportOptions o;
  o.db_label = "big.db";
  const std::string page = render_report(db, o);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 10.0);  // about 0.2 s here; sanitizers are slower
  EXPECT_LT(page.size(), std::size_t{5} << 20);
  EXPECT_EQ(count(plot(page, "tuning-0"), "class=\"mark"), 1U);
  EXPECT_GT(count(plot(page, "heatmap-0"), "class=\"mark"), 100U);
}

}  // namespace
}  // namespace ka::report
