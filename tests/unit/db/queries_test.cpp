// The read-only views of queries.hpp on databases written through ResultsStore, the writer
// ka-bench and ka-tune use: every field comes back from the column it names.
#include <ka/core/error.hpp>
#include <ka/core/fingerprint.hpp>
#include <ka/db/queries.hpp>
#include <ka/db/results_store.hpp>
#include <ka/db/schema.hpp>

#include "scratch_dir.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace ka::db {
namespace {

const std::string kMm64 = "aten::mm(f32[64,64]c,f32[64,64]c)";
const std::string kMm128 = "aten::mm(f32[128,128]c,f32[128,128]c)";

TrialRow trial(const std::string& shape_key, const std::string& kernel, int version,
               const std::string& config, std::optional<double> median_ns,
               Disposition disposition = Disposition::kOk) {
  TrialRow t;
  t.op = "aten::mm";
  t.shape_key = shape_key;
  t.kernel = kernel;
  t.kernel_version = version;
  t.config = config;
  t.disposition = disposition;
  t.median_ns = median_ns;
  t.repetitions = 7;
  return t;
}

// A result row is counted, never read back here: its name keeps it unique within the run.
ResultRow result(const std::string& case_name) {
  ResultRow r;
  r.case_name = case_name;
  r.benchmark_name = "matmul/" + case_name + "/ka";
  return r;
}

TEST(QueriesTest, ListRunsCountsEachRunsResultsAndTrials) {
  test::ScratchDir dir;
  const RunInfo tune = cpu_run_info("ka-tune", "ka-tune --op aten::mm");
  const RunInfo bench = cpu_run_info("ka-bench", "ka-bench --suite matmul");
  std::int64_t tune_run = 0;
  std::int64_t bench_run = 0;
  {
    ResultsStore store(dir.path("ka.db"));
    tune_run = store.begin_run(tune);
    store.add_trials(tune_run, {trial(kMm64, "gemm_a", 1, "grid=1x1x1 block=1x1x1", 10.0),
                                trial(kMm64, "gemm_a", 1, "grid=2x1x1 block=1x1x1", 20.0)});
    store.finish_run(tune_run, true);
    bench_run = store.begin_run(bench);
    store.add_results(bench_run, {result("a"), result("b"), result("c")});
  }
  Connection db(dir.path("ka.db"), Connection::Mode::kReadOnly);
  const std::vector<RunSummary> runs = list_runs(db);
  ASSERT_EQ(runs.size(), 2U);

  EXPECT_EQ(runs[0].id, tune_run);
  EXPECT_EQ(runs[0].tool, "ka-tune");
  EXPECT_EQ(runs[0].status, "complete");
  EXPECT_FALSE(runs[0].started_at.empty());
  ASSERT_TRUE(runs[0].finished_at.has_value());
  EXPECT_GE(*runs[0].finished_at, runs[0].started_at);  // ISO 8601 sorts as text
  EXPECT_EQ(runs[0].device, tune.device);
  EXPECT_EQ(runs[0].host, tune.host);
  EXPECT_EQ(runs[0].results, 0);
  EXPECT_EQ(runs[0].trials, 2);

  EXPECT_EQ(runs[1].id, bench_run);
  EXPECT_EQ(runs[1].tool, "ka-bench");
  EXPECT_EQ(runs[1].status, "running");
  EXPECT_FALSE(runs[1].finished_at.has_value());
  EXPECT_EQ(runs[1].results, 3);
  EXPECT_EQ(runs[1].trials, 0);
}

TEST(QueriesTest, SchemaOneRunsHaveNoTrialsAndNoDevicesTable) {
  test::ScratchDir dir;
  Connection db(dir.path("v1.db"));
  detail::migrate_to(db, 1);
  // No writer of this build writes schema 1: the row is inserted as an old ka-bench did.
  db.exec(
      "INSERT INTO runs (started_at, status, tool, command_line, host, ka_version, git_sha, "
      "device, fingerprint, fingerprint_json, threads) VALUES ('2024-01-01T00:00:00Z', "
      "'failed', 'ka-bench', 'c', 'h', '0', 'abc', 'cpu', 'cpu|x', '{}', 2)");
  const std::vector<RunSummary> runs = list_runs(db);
  ASSERT_EQ(runs.size(), 1U);
  EXPECT_EQ(runs[0].status, "failed");
  EXPECT_EQ(runs[0].started_at, "2024-01-01T00:00:00Z");
  EXPECT_EQ(runs[0].host, "h");
  EXPECT_EQ(runs[0].trials, 0);
  try {
    list_devices(db);
    FAIL() << "a schema-1 database has no devices";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("v1.db"), std::string::npos) << e.what();
  }
}

TEST(QueriesTest, ListDevicesCountsTheirRecommendations) {
  test::ScratchDir dir;
  const DeviceFingerprint here = cpu_fingerprint();
  DeviceFingerprint other = here;
  other.name = "Other CPU";
  ASSERT_NE(other.key(), here.key());
  {
    ResultsStore store(dir.path("ka.db"));
    store.record_device(here);
    store.record_device(other);
    Recommendation r;
    r.fingerprint = other.key();
    r.op = "aten::mm";
    r.shape_key = kMm64;
    r.kernel = "gemm_a";
    r.kernel_version = 1;
    Recommendation r2 = r;
    r2.shape_key = kMm128;
    store.put_recommendations({r, r2});
  }
  Connection db(dir.path("ka.db"), Connection::Mode::kReadOnly);
  const std::vector<DeviceSummary> devices = list_devices(db);
  ASSERT_EQ(devices.size(), 2U);
  EXPECT_EQ(devices[0].fingerprint, here.key());
  EXPECT_EQ(devices[0].recommendations, 0);
  EXPECT_FALSE(devices[0].first_seen.empty());
  EXPECT_GE(devices[0].last_seen, devices[0].first_seen);
  EXPECT_EQ(devices[1].fingerprint, other.key());
  EXPECT_EQ(devices[1].recommendations, 2);
}

// Two runs of two kernel versions over two shapes, one trial failed.
void write_sweeps(const std::string& path) {
  ResultsStore store(path);
  const std::int64_t first = store.begin_run(cpu_run_info("ka-tune", "first"));
  store.add_trials(first, {trial(kMm64, "gemm_a", 1, "grid=1x1x1 block=1x1x1", 30.0),
                           trial(kMm64, "gemm_a", 1, "grid=2x1x1 block=1x1x1", std::nullopt,
                                 Disposition::kFailed),
                           trial(kMm128, "gemm_a", 1, "grid=1x1x1 block=1x1x1", 50.0)});
  const std::int64_t second = store.begin_run(cpu_run_info("ka-tune", "second"));
  TrialRow timed_out =
      trial(kMm64, "gemm_a", 2, "grid=4x1x1 block=1x1x1", std::nullopt, Disposition::kTimeout);
  timed_out.error = "over 2 s";
  TrialRow fastest = trial(kMm64, "gemm_a", 2, "grid=3x1x1 block=1x1x1", 10.0);
  fastest.ci95_ns = 0.5;
  store.add_trials(second,
                   {timed_out, fastest, trial(kMm64, "gemm_a", 1, "grid=1x1x1 block=1x1x1", 20.0)});
}

TEST(QueriesTest, CountTrialsGroupsByOpKernelAndVersion) {
  test::ScratchDir dir;
  write_sweeps(dir.path("ka.db"));
  Connection db(dir.path("ka.db"), Connection::Mode::kReadOnly);
  const std::vector<TrialCounts> counts = count_trials(db);
  ASSERT_EQ(counts.size(), 2U);
  EXPECT_EQ(counts[0].op, "aten::mm");
  EXPECT_EQ(counts[0].kernel, "gemm_a");
  EXPECT_EQ(counts[0].kernel_version, 1);
  EXPECT_EQ(counts[0].shapes, 2);
  EXPECT_EQ(counts[0].trials, 4);
  EXPECT_EQ(counts[0].ok, 3);
  EXPECT_EQ(counts[0].runs, 2);
  EXPECT_EQ(counts[1].kernel_version, 2);
  EXPECT_EQ(counts[1].shapes, 1);
  EXPECT_EQ(counts[1].trials, 2);
  EXPECT_EQ(counts[1].ok, 1);
  EXPECT_EQ(counts[1].runs, 1);
}

TEST(QueriesTest, ListTrialsFiltersAndPutsTheFastestFirst) {
  test::ScratchDir dir;
  write_sweeps(dir.path("ka.db"));
  Connection db(dir.path("ka.db"), Connection::Mode::kReadOnly);
  const std::vector<StoredTrial> shape = list_trials(db, {"aten::mm", kMm64});
  ASSERT_EQ(shape.size(), 5U);
  // By median, fastest first; trials without a median last.
  EXPECT_EQ(shape[0].median_ns, 10.0);
  EXPECT_EQ(shape[1].median_ns, 20.0);
  EXPECT_EQ(shape[2].median_ns, 30.0);
  EXPECT_FALSE(shape[3].median_ns.has_value());
  EXPECT_FALSE(shape[4].median_ns.has_value());

  const StoredTrial& fastest = shape[0];
  EXPECT_EQ(fastest.run_id, 2);
  EXPECT_EQ(fastest.shape_key, kMm64);
  EXPECT_EQ(fastest.kernel, "gemm_a");
  EXPECT_EQ(fastest.kernel_version, 2);
  EXPECT_EQ(fastest.config, "grid=3x1x1 block=1x1x1");
  EXPECT_EQ(fastest.disposition, Disposition::kOk);
  EXPECT_EQ(fastest.ci95_ns, 0.5);
  EXPECT_EQ(fastest.repetitions, 7);
  EXPECT_FALSE(shape[1].ci95_ns.has_value());

  const bool failed_first = shape[3].disposition == Disposition::kFailed;
  const StoredTrial& failed = shape[failed_first ? 3 : 4];
  const StoredTrial& timed_out = shape[failed_first ? 4 : 3];
  EXPECT_EQ(failed.disposition, Disposition::kFailed);
  EXPECT_EQ(failed.run_id, 1);
  EXPECT_EQ(timed_out.disposition, Disposition::kTimeout);
  EXPECT_EQ(timed_out.error, "over 2 s");
  EXPECT_EQ(timed_out.config, "grid=4x1x1 block=1x1x1");

  EXPECT_EQ(list_trials(db, {}).size(), 6U);
  EXPECT_EQ(list_trials(db, {"aten::mm", ""}).size(), 6U);
  EXPECT_EQ(list_trials(db, {"", kMm128}).size(), 1U);
  EXPECT_TRUE(list_trials(db, {"aten::addmm", ""}).empty());
}

}  // namespace
}  // namespace ka::db
