#include <ka/core/error.hpp>
#include <ka/core/shape_key.hpp>
#include <ka/db/recommendation_io.hpp>
#include <ka/db/results_store.hpp>
#include <ka/db/schema.hpp>
#include <ka/db/table_ops.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ka::db {
namespace {
namespace fs = std::filesystem;

const std::string kFp = "cpu|Test CPU|avx2|cores=2";
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string mm_key(std::int64_t m) {
  const TensorSpec a{DType::kFloat32, {m, 8}, true};
  const TensorSpec b{DType::kFloat32, {8, 8}, true};
  return ShapeKey("aten::mm", {a, b}).str();
}

// Configs are told apart by grid.x.
Recommendation rec(std::int64_t m, int version, double median_ns, std::int64_t grid_x = 1,
                   const std::string& kernel = "gemm_a") {
  Recommendation r;
  r.fingerprint = kFp;
  r.op = "aten::mm";
  r.shape_key = mm_key(m);
  r.kernel = kernel;
  r.kernel_version = version;
  r.config.grid = {grid_x, 1, 1};
  r.median_ns = median_ns;
  r.gain_over_default = 1.25;
  return r;
}

class TableOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ka_table_ops_test_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  [[nodiscard]] std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static RunInfo run_info(const std::string& host) {
    RunInfo info;
    info.tool = "ka-tune";
    info.command_line = "ka-tune --op aten::mm";
    info.host = host;
    info.ka_version = "0";
    info.git_sha = "abc";
    info.device = "cpu";
    info.fingerprint = kFp;
    info.fingerprint_json = "{}";
    return info;
  }

  // A database tuned on `host`: one run, one trial per row (with `ci95_ns`), the rows as its
  // recommendations.
  void make_db(const std::string& file, const std::string& host, std::vector<Recommendation> rows,
               std::optional<double> ci95_ns = std::nullopt) {
    ResultsStore store(path(file));
    const std::int64_t run = store.begin_run(run_info(host));
    std::vector<TrialRow> trials;
    for (Recommendation& r : rows) {
      r.source_run = run;
      TrialRow t;
      t.op = r.op;
      t.shape_key = r.shape_key;
      t.kernel = r.kernel;
      t.kernel_version = r.kernel_version;
      t.config = r.config.str();
      t.median_ns = r.median_ns;
      t.ci95_ns = ci95_ns;
      t.repetitions = 10;
      trials.push_back(t);
    }
    store.add_trials(run, trials);
    store.finish_run(run, true);
    store.put_recommendations(rows);
  }

  static std::int64_t count(Connection& db, const std::string& sql) {
    auto st = db.prepare(sql);
    st.step();
    return st.column_int64(0);
  }

  fs::path dir_;
};

TEST(MergePrefers, LowerMedianWinsAtEqualVersions) {
  EXPECT_TRUE(merge_prefers(rec(4, 1, 90.0), rec(4, 1, 100.0)));
  EXPECT_FALSE(merge_prefers(rec(4, 1, 110.0), rec(4, 1, 100.0)));
  EXPECT_FALSE(merge_prefers(rec(4, 1, 100.0), rec(4, 1, 100.0))) << "a tie keeps the target's";
}

TEST(MergePrefers, NewerKernelVersionWinsWhateverTheMedian) {
  EXPECT_TRUE(merge_prefers(rec(4, 2, 500.0), rec(4, 1, 100.0)));
  EXPECT_FALSE(merge_prefers(rec(4, 1, 10.0), rec(4, 2, 100.0)));
}

TEST(MergePrefers, KnownMedianBeatsUnknown) {
  EXPECT_TRUE(merge_prefers(rec(4, 1, 100.0), rec(4, 1, kNaN)));
  EXPECT_FALSE(merge_prefers(rec(4, 1, kNaN), rec(4, 1, 100.0)));
  EXPECT_FALSE(merge_prefers(rec(4, 1, kNaN), rec(4, 1, kNaN)));
}

TEST_F(TableOpsTest, MergeCombinesMachinesWithWinnerAndVersionRules) {
  // Machine A: m=1 fast, m=2 slow, m=3 at version 1 (fast), m=4 only here.
  make_db("a.db", "box-a",
          {rec(1, 1, 100.0, 11), rec(2, 1, 300.0, 12), rec(3, 1, 50.0, 13), rec(4, 1, 70.0, 14)});
  // Machine B: m=1 slower (kept A's), m=2 faster (replaces), m=3 at version 2 but slower
  // (replaces: newer version), m=5 only here.
  make_db("b.db", "box-b",
          {rec(1, 1, 120.0, 21), rec(2, 1, 200.0, 22), rec(3, 2, 80.0, 23), rec(5, 1, 60.0, 25)});

  Connection target(path("merged.db"));
  const MergeCounts c = merge_databases(target, {path("a.db"), path("b.db")});
  EXPECT_EQ(c.added, 5u);  // 4 from A, then m=5 from B
  EXPECT_EQ(c.replaced, 2u);
  EXPECT_EQ(c.kept, 1u);
  EXPECT_EQ(c.runs, 2u);
  EXPECT_EQ(c.trials, 8u);
  EXPECT_EQ(c.devices, 1u);

  const auto rows = read_recommendation_rows(path("merged.db"));
  ASSERT_EQ(rows.size(), 5u);
  auto find = [&rows](std::int64_t m) {
    for (const auto& r : rows) {
      if (r.shape_key == mm_key(m)) return r;
    }
    ADD_FAILURE() << "no row for m=" << m;
    return Recommendation{};
  };
  EXPECT_EQ(find(1).config.grid.x, 11);
  EXPECT_EQ(find(2).config.grid.x, 22);
  EXPECT_EQ(find(3).config.grid.x, 23);
  EXPECT_EQ(find(3).kernel_version, 2);
  EXPECT_EQ(find(5).config.grid.x, 25);

  // source_run names the copied run of the machine that tuned the row.
  auto host_of = [&target](std::int64_t run) {
    auto st = target.prepare("SELECT host FROM runs WHERE id = ?");
    st.bind(1, run);
    return st.step() ? st.column_text(0) : std::string("<none>");
  };
  ASSERT_TRUE(find(1).source_run.has_value());
  EXPECT_EQ(host_of(*find(1).source_run), "box-a");
  ASSERT_TRUE(find(2).source_run.has_value());
  EXPECT_EQ(host_of(*find(2).source_run), "box-b");
  EXPECT_EQ(count(target,
                  "SELECT count(*) FROM trials t JOIN runs r ON r.id = t.run_id "
                  "WHERE r.host = 'box-b'"),
            4);
}

TEST_F(TableOpsTest, MergingTwiceChangesNothing) {
  make_db("a.db", "box-a", {rec(1, 1, 100.0), rec(2, 1, 200.0)});
  Connection target(path("merged.db"));
  merge_databases(target, {path("a.db")});
  const MergeCounts again = merge_databases(target, {path("a.db")});
  EXPECT_EQ(again.added, 0u);
  EXPECT_EQ(again.replaced, 0u);
  EXPECT_EQ(again.kept, 2u);
  EXPECT_EQ(again.runs, 0u);
  EXPECT_EQ(again.runs_present, 1u);
  EXPECT_EQ(again.trials, 0u);
  EXPECT_EQ(count(target, "SELECT count(*) FROM runs"), 1);
  EXPECT_EQ(count(target, "SELECT count(*) FROM trials"), 2);
}

TEST_F(TableOpsTest, MergeReadsSourcesOfAnOlderSchema) {
  // A schema-5 database lacks the columns step 6 added (runs.copy_gbps, results.flop, ...):
  // they merge as NULL, the rest as stored.
  {
    Connection old(path("v5.db"));
    detail::migrate_to(old, 5);
    old.exec(
        "INSERT INTO runs (started_at, status, tool, command_line, host, ka_version, git_sha, "
        "device, fingerprint, fingerprint_json, threads) VALUES ('2026-01-01T00:00:00Z', "
        "'complete', 'ka-bench', 'ka-bench', 'old-box', '0', 'abc', 'cpu', 'cpu|x', '{}', 2)");
    old.exec(
        "INSERT INTO results (run_id, suite, case_name, impl, benchmark_name, op, shape_key, "
        "dtype, disposition, median_ns) VALUES (1, 's', 'c', 'ka', 's/c/ka', 'aten::mm', 'k', "
        "'float32', 'ok', 10.0)");
  }
  Connection target(path("merged.db"));
  const MergeCounts c = merge_databases(target, {path("v5.db")});
  EXPECT_EQ(c.runs, 1u);
  EXPECT_EQ(c.results, 1u);
  EXPECT_EQ(count(target, "SELECT threads FROM runs WHERE host = 'old-box'"), 2);
  EXPECT_EQ(count(target, "SELECT count(*) FROM runs WHERE copy_gbps IS NULL AND strategy IS NULL"),
            1);
  EXPECT_EQ(count(target, "SELECT count(*) FROM results WHERE flop IS NULL AND median_ns = 10"), 1);
}

TEST_F(TableOpsTest, MergeIsAllOrNothing) {
  make_db("a.db", "box-a", {rec(1, 1, 100.0)});
  {
    std::ofstream bad(path("bad.db"));
    bad << "not a database at all, just text that is long enough to be read as a header";
  }
  Connection target(path("merged.db"));
  EXPECT_THROW(merge_databases(target, {path("a.db"), path("bad.db")}), DbError);
  EXPECT_EQ(count(target, "SELECT count(*) FROM recommendations"), 0);
  EXPECT_THROW(merge_databases(target, {path("merged.db")}), ValueError) << "into itself";
}

// A merge checks each source row as an import does (Note [Validated rows]): a row ka could
// not have written is refused, naming the file and row, and the target keeps what it had.
TEST_F(TableOpsTest, MergeRefusesRowsImportRefuses) {
  const std::vector<std::pair<std::string, std::string>> corruptions = {
      {"UPDATE recommendations SET shape_key = 'garbage'", "recommendations row 1: "},
      {"UPDATE recommendations SET median_ns = 'abc'", "median_ns 'abc' is not a finite number > 0"},
      {"UPDATE recommendations SET median_ns = -1e308", "is not a finite number > 0"},
      {"UPDATE recommendations SET gain_over_default = 'x'", "gain_over_default 'x'"},
      {"UPDATE recommendations SET kernel_version = 'new'", "kernel_version 'new'"},
  };
  make_db("good.db", "box-g", {rec(3, 1, 300.0)});
  for (const auto& [sql, message] : corruptions) {
    SCOPED_TRACE(sql);
    fs::remove(path("bad.db"));
    make_db("bad.db", "box-b", {rec(1, 1, 100.0)});
    {
      Connection bad(path("bad.db"));
      bad.exec(sql);
    }
    Connection target(path("merged.db"));
    merge_databases(target, {path("good.db")});
    try {
      merge_databases(target, {path("bad.db")});
      ADD_FAILURE() << "merge accepted the row";
    } catch (const DbError& e) {
      EXPECT_NE(std::string(e.what()).find(path("bad.db")), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
    EXPECT_EQ(count(target, "SELECT count(*) FROM recommendations"), 1);
    EXPECT_EQ(count(target, "SELECT count(*) FROM runs"), 1);
    // Import reads the rows the same way and refuses the same file.
    EXPECT_THROW(import_sqlite(path("bad.db"), target, kFp, {{"gemm_a", 1}}), DbError);
  }
}

TEST(ClassifyChange, ThresholdOnlyWithoutCi) {
  EXPECT_EQ(classify_change(100.0, 102.0, std::nullopt, std::nullopt, 0.03), DiffStatus::kSame);
  EXPECT_EQ(classify_change(100.0, 110.0, std::nullopt, std::nullopt, 0.03),
            DiffStatus::kRegression);
  EXPECT_EQ(classify_change(100.0, 90.0, std::nullopt, std::nullopt, 0.03),
            DiffStatus::kImprovement);
  // One CI alone is not enough to use it.
  EXPECT_EQ(classify_change(100.0, 110.0, 50.0, std::nullopt, 0.03), DiffStatus::kRegression);
  EXPECT_EQ(classify_change(kNaN, 110.0, std::nullopt, std::nullopt, 0.03), DiffStatus::kUnknown);
}

TEST(ClassifyChange, BothCisMustBeExceeded) {
  // 10% slower, but CIs of ±8 each: combined ±11.3 → noise.
  EXPECT_EQ(classify_change(100.0, 110.0, 8.0, 8.0, 0.03), DiffStatus::kWithinNoise);
  // 20% slower beyond the combined ±11.3 → regression.
  EXPECT_EQ(classify_change(100.0, 120.0, 8.0, 8.0, 0.03), DiffStatus::kRegression);
  // Tight CIs, 2% slower: within the threshold.
  EXPECT_EQ(classify_change(100.0, 102.0, 0.1, 0.1, 0.03), DiffStatus::kSame);
  EXPECT_EQ(classify_change(100.0, 80.0, 8.0, 8.0, 0.03), DiffStatus::kImprovement);
}

TEST(DiffTables, CasesInOneTableAndBestKernelPerShape) {
  const std::vector<Recommendation> a = {rec(1, 1, 100.0), rec(2, 1, 100.0), rec(3, 1, 100.0)};
  const std::vector<Recommendation> b = {rec(1, 1, 150.0), rec(1, 1, 101.0, 2, "gemm_b"),
                                         rec(3, 1, 200.0), rec(4, 1, 100.0)};
  const auto rows = diff_tables(a, b, 0.03);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].shape_key, mm_key(1));
  EXPECT_EQ(rows[0].status, DiffStatus::kSame) << "gemm_b at 101 ns is B's best for m=1";
  EXPECT_EQ(rows[0].b->kernel, "gemm_b");
  EXPECT_NEAR(rows[0].ratio, 1.01, 1e-12);
  EXPECT_EQ(rows[1].status, DiffStatus::kOnlyA);
  EXPECT_EQ(rows[2].status, DiffStatus::kRegression);
  EXPECT_FALSE(rows[2].used_ci);
  EXPECT_EQ(rows[3].status, DiffStatus::kOnlyB);
  EXPECT_THROW(diff_tables(a, b, -1.0), ValueError);
}

TEST_F(TableOpsTest, DiffDatabasesUsesTheTrialsCi) {
  make_db("a.db", "box-a", {rec(1, 1, 100.0), rec(2, 1, 100.0)}, 8.0);
  // m=1: 10% slower, within the CIs; m=2: 40% slower, a regression.
  make_db("b.db", "box-b", {rec(1, 1, 110.0), rec(2, 1, 140.0)}, 8.0);
  const auto rows = diff_databases(path("a.db"), path("b.db"), kFp, 0.03);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(rows[0].used_ci);
  ASSERT_TRUE(rows[0].ci95_a_ns.has_value());
  EXPECT_DOUBLE_EQ(*rows[0].ci95_a_ns, 8.0);
  EXPECT_EQ(rows[0].status, DiffStatus::kWithinNoise);
  EXPECT_EQ(rows[1].status, DiffStatus::kRegression);
  // Another device's fingerprint: nothing to compare.
  EXPECT_TRUE(diff_databases(path("a.db"), path("b.db"), "cpu|other", 0.03).empty());
}

}  // namespace
}  // namespace ka::db
