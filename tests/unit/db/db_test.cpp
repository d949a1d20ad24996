#include <ka/core/error.hpp>
#include <ka/db/results_store.hpp>
#include <ka/db/schema.hpp>
#include <ka/db/sqlite.hpp>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace ka::db {
namespace {
namespace fs = std::filesystem;

class DbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ka_db_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static std::int64_t count(Connection& db, const std::string& table) {
    auto st = db.prepare("SELECT count(*) FROM " + table);
    st.step();
    return st.column_int64(0);
  }

  static RunInfo run_info() {
    RunInfo info;
    info.tool = "test";
    info.command_line = "db_test";
    info.host = "h";
    info.ka_version = "0";
    info.git_sha = "abc";
    info.device = "cpu";
    info.fingerprint = "cpu|x";
    info.fingerprint_json = "{}";
    info.threads = 2;
    info.fma_peak_gflops = 100.0;
    return info;
  }

  static ResultRow row(const std::string& name, Disposition d = Disposition::kOk) {
    ResultRow r;
    r.suite = "s";
    r.case_name = name;
    r.impl = "ka";
    r.benchmark_name = "s/" + name + "/ka";
    r.op = "aten::mm";
    r.shape_key = "aten::mm(f32[1,1]c,f32[1,1]c)";
    r.dtype = "float32";
    r.disposition = d;
    r.median_ns = 12.5;
    return r;
  }

  static TrialRow trial_row() {
    TrialRow t;
    t.op = "aten::mm";
    t.shape_key = "aten::mm(f32[1,1]c,f32[1,1]c)";
    t.kernel = "gemm";
    t.kernel_version = 1;
    t.config = "grid=1x1x1 block=1x1x1";
    return t;
  }

  fs::path dir_;
};

TEST_F(DbTest, EmptyFileMigratesToCurrentSchema) {
  Connection db(path("a.db"));
  EXPECT_EQ(db.user_version(), 0);
  migrate(db);
  EXPECT_EQ(db.user_version(), kSchemaVersion);
  for (const char* table : {"runs", "results", "devices", "trials", "recommendations"}) {
    auto st = db.prepare("SELECT count(*) FROM sqlite_master WHERE type='table' AND name=?");
    st.bind(1, table);
    ASSERT_TRUE(st.step());
    EXPECT_EQ(st.column_int64(0), 1) << table;
  }
  migrate(db);  // idempotent
  EXPECT_EQ(db.user_version(), kSchemaVersion);
}

TEST_F(DbTest, VersionOneMigratesToCurrentKeepingItsRows) {
  {
    Connection db(path("v1.db"));
    detail::migrate_to(db, 1);
    EXPECT_EQ(db.user_version(), 1);
    db.exec(
        "INSERT INTO runs (started_at, status, tool, command_line, host, ka_version, git_sha, "
        "device, fingerprint, fingerprint_json, threads) VALUES ('t', 'complete', 'ka-bench', "
        "'c', 'h', '0', 'abc', 'cpu', 'cpu|x', '{}', 2)");
    auto st = db.prepare("SELECT count(*) FROM sqlite_master WHERE name = 'trials'");
    ASSERT_TRUE(st.step());
    EXPECT_EQ(st.column_int64(0), 0);
  }
  ResultsStore store(path("v1.db"));  // migrates 1 -> kSchemaVersion in one transaction
  Connection& db = store.connection();
  EXPECT_EQ(db.user_version(), kSchemaVersion);
  EXPECT_EQ(count(db, "runs"), 1);
  const auto run = store.begin_run(run_info());
  EXPECT_EQ(run, 2);
  store.add_results(run, {row("a")});
  EXPECT_EQ(store.add_trials(1, {trial_row()}), 1U);  // a trial of the pre-migration run
  EXPECT_EQ(count(db, "trials"), 1);
}

// Step 4 rebuilds `results` and `trials` to admit 'crashed': every row and every column value
// survives, the indices are back, and the old CHECK still refuses what it refused.
TEST_F(DbTest, VersionTwoMigratesKeepingResultsAndTrials) {
  {
    Connection db(path("v2.db"));
    detail::migrate_to(db, 2);
    db.exec(
        "INSERT INTO runs (started_at, status, tool, command_line, host, ka_version, git_sha, "
        "device, fingerprint, fingerprint_json, threads) VALUES ('t', 'complete', 'ka-tune', "
        "'c', 'h', '0', 'abc', 'cpu', 'cpu|x', '{}', 2)");
    db.exec(
        "INSERT INTO results (run_id, suite, case_name, impl, benchmark_name, op, shape_key, "
        "dtype, disposition, error, median_ns) VALUES (1, 's', 'a', 'ka', 's/a/ka', 'aten::mm', "
        "'k', 'float32', 'incorrect', 'off by one', 12.5)");
    db.exec(
        "INSERT INTO trials (run_id, op, shape_key, kernel, kernel_version, config, "
        "disposition, median_ns, ci95_ns, repetitions, created_at) VALUES (1, 'aten::mm', 'k', "
        "'gemm', 3, 'tile_m=8', 'ok', 7.25, 0.5, 11, 'now')");
  }
  ResultsStore store(path("v2.db"));
  Connection& db = store.connection();
  EXPECT_EQ(db.user_version(), kSchemaVersion);
  auto r = db.prepare("SELECT case_name, disposition, error, median_ns FROM results");
  ASSERT_TRUE(r.step());
  EXPECT_EQ(r.column_text(0), "a");
  EXPECT_EQ(r.column_text(1), "incorrect");
  EXPECT_EQ(r.column_text(2), "off by one");
  EXPECT_DOUBLE_EQ(r.column_double(3), 12.5);
  EXPECT_FALSE(r.step());
  auto t = db.prepare(
      "SELECT kernel_version, config, median_ns, ci95_ns, repetitions, cache_state FROM trials");
  ASSERT_TRUE(t.step());
  EXPECT_EQ(t.column_int64(0), 3);
  EXPECT_EQ(t.column_text(1), "tile_m=8");
  EXPECT_DOUBLE_EQ(t.column_double(2), 7.25);
  EXPECT_DOUBLE_EQ(t.column_double(3), 0.5);
  EXPECT_EQ(t.column_int64(4), 11);
  EXPECT_EQ(t.column_text(5), "hot");
  EXPECT_FALSE(t.step());
  auto idx = db.prepare(
      "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name IN "
      "('results_by_shape', 'trials_by_shape')");
  ASSERT_TRUE(idx.step());
  EXPECT_EQ(idx.column_int64(0), 2);

  TrialRow crashed = trial_row();
  crashed.disposition = Disposition::kCrashed;
  crashed.error = "the worker process was killed by signal 11 (Segmentation fault)";
  EXPECT_EQ(store.add_trials(1, {crashed}), 1U);
  store.add_results(1, {row("b", Disposition::kCrashed)});
  EXPECT_EQ(count(db, "trials"), 2);
  EXPECT_EQ(count(db, "results"), 2);
  EXPECT_THROW(db.exec("UPDATE trials SET disposition = 'exploded'"), DbError);
}

TEST_F(DbTest, ResumedTrialsUpdateInsteadOfDuplicating) {
  ResultsStore store(path("trials.db"));
  const auto run = store.begin_run(run_info());
  auto trial = [](const std::string& config, double median_ns, Disposition d) {
    TrialRow r;
    r.op = "aten::addmm";
    r.shape_key = "aten::addmm(f32[8]c,f32[4,8]c,f32[8,8]c)";
    r.kernel = "gemm_f32_blocked";
    r.kernel_version = 1;
    r.config = config;
    r.disposition = d;
    r.median_ns = median_ns;
    r.ci95_ns = 0.5;
    r.repetitions = 9;
    return r;
  };
  const std::string a = "grid=1x1x1 block=64x64x1 tile_k=128";
  const std::string b = "grid=1x1x1 block=32x32x1 tile_k=128";
  EXPECT_EQ(store.add_trials(
                run, {trial(a, 100.0, Disposition::kOk), trial(b, 0.0, Disposition::kTimeout)}),
            2U);
  // The sweep is killed and resumes: the same trials come again, one re-measured.
  EXPECT_EQ(store.add_trials(
                run, {trial(a, 90.0, Disposition::kOk), trial(b, 0.0, Disposition::kTimeout)}),
            0U);
  Connection& db = store.connection();
  EXPECT_EQ(count(db, "trials"), 2);
  auto st = db.prepare("SELECT median_ns, ci95_ns, repetitions FROM trials WHERE config = ?");
  st.bind(1, a);
  ASSERT_TRUE(st.step());
  EXPECT_DOUBLE_EQ(st.column_double(0), 90.0);
  EXPECT_DOUBLE_EQ(st.column_double(1), 0.5);
  EXPECT_EQ(st.column_int64(2), 9);
  // Another run keeps its own trials.
  const auto run2 = store.begin_run(run_info());
  EXPECT_EQ(store.add_trials(run2, {trial(a, 95.0, Disposition::kOk)}), 1U);
  EXPECT_EQ(count(db, "trials"), 3);
  // The schema refuses what no disposition or cache state names, and nothing half-written
  // stays.
  auto bad = trial("grid=2x1x1 block=1x1x1", 1.0, Disposition::kOk);
  bad.cache_state = "lukewarm";
  EXPECT_THROW(
      store.add_trials(run2, {trial("grid=3x1x1 block=1x1x1", 1.0, Disposition::kOk), bad}),
      DbError);
  EXPECT_EQ(count(db, "trials"), 3);
}

TEST_F(DbTest, DevicesAreRecordedOnceAndRefreshed) {
  ResultsStore store(path("dev.db"));
  DeviceFingerprint fp = cpu_fingerprint();
  store.record_device(fp);
  store.record_device(fp);
  Connection& db = store.connection();
  EXPECT_EQ(count(db, "devices"), 1);
  auto st = db.prepare("SELECT fingerprint, fields_json FROM devices");
  ASSERT_TRUE(st.step());
  EXPECT_EQ(st.column_text(0), fp.key());
  EXPECT_NE(st.column_text(1).find("\"isa\":\"" + fp.isa + "\""), std::string::npos)
      << st.column_text(1);
}

TEST_F(DbTest, NewerSchemaIsRefusedWithAClearMessage) {
  {
    Connection db(path("new.db"));
    db.set_user_version(kSchemaVersion + 5);
  }
  Connection db(path("new.db"));
  try {
    migrate(db);
    FAIL();
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("newer than this ka supports"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("new.db"), std::string::npos);
  }
}

TEST_F(DbTest, RunsAndResultsRoundTrip) {
  ResultsStore store(path("r.db"));
  const auto run = store.begin_run(run_info());
  store.add_results(run, {row("a"), row("b", Disposition::kIncorrect)});
  store.finish_run(run, true);
  Connection& db = store.connection();
  EXPECT_EQ(count(db, "results"), 2);
  auto st = db.prepare("SELECT status, finished_at IS NOT NULL, threads FROM runs WHERE id = ?");
  st.bind(1, run);
  ASSERT_TRUE(st.step());
  EXPECT_EQ(st.column_text(0), "complete");
  EXPECT_EQ(st.column_int64(1), 1);
  EXPECT_EQ(st.column_int64(2), 2);
  auto r = db.prepare("SELECT disposition, median_ns, gflops FROM results WHERE case_name = 'b'");
  ASSERT_TRUE(r.step());
  EXPECT_EQ(r.column_text(0), "incorrect");
  EXPECT_DOUBLE_EQ(r.column_double(1), 12.5);
  EXPECT_TRUE(r.column_is_null(2));
}

// c10::Error::what() ends in kilobytes of stack frames; the error column keeps the message
// (and trailing newlines go too).
TEST_F(DbTest, StoredErrorsHaveNoStackFrames) {
  ResultsStore store(path("e.db"));
  const auto run = store.begin_run(run_info());
  const std::string c10_what =
      "Expected all tensors to be on the same device\nException raised from check at "
      "/pytorch/aten/src/ATen/x.cpp:12 (most recent call first):\nframe #0: c10::Error::Error()\n";
  ResultRow result = row("a", Disposition::kFailed);
  result.error = c10_what;
  store.add_results(run, {result});
  TrialRow trial = trial_row();
  trial.disposition = Disposition::kFailed;
  trial.error = c10_what;
  store.add_trials(run, {trial});
  for (const char* table : {"results", "trials"}) {
    auto st = store.connection().prepare(std::string("SELECT error FROM ") + table);
    ASSERT_TRUE(st.step()) << table;
    EXPECT_EQ(st.column_text(0), "Expected all tensors to be on the same device") << table;
  }
}

TEST_F(DbTest, FailedBatchLeavesNoPartialRows) {
  ResultsStore store(path("t.db"));
  const auto run = store.begin_run(run_info());
  store.add_results(run, {row("kept")});
  // The third row repeats a benchmark name of the batch: UNIQUE fails after two inserts.
  EXPECT_THROW(store.add_results(run, {row("x"), row("y"), row("x")}), DbError);
  EXPECT_EQ(count(store.connection(), "results"), 1);
  // And the connection is still usable.
  store.add_results(run, {row("z")});
  EXPECT_EQ(count(store.connection(), "results"), 2);
}

TEST_F(DbTest, TransactionRollsBackOnException) {
  Connection db(path("x.db"));
  db.exec("CREATE TABLE t (v INTEGER)");
  try {
    Transaction tx(db);
    db.exec("INSERT INTO t VALUES (1)");
    db.exec("INSERT INTO t VALUES (2)");
    throw std::runtime_error("interrupted");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(count(db, "t"), 0);
  {
    Transaction tx(db);
    db.exec("INSERT INTO t VALUES (3)");
    tx.commit();
  }
  EXPECT_EQ(count(db, "t"), 1);
}

TEST_F(DbTest, UnopenablePathNamesThePath) {
  const std::string bad = path("no/such/dir/ka.db");
  try {
    ResultsStore store(bad);
    FAIL();
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(bad));
}

TEST_F(DbTest, NotADatabaseIsRefused) {
  {
    std::ofstream junk(path("junk.db"));
    junk << "this is not an SQLite database, just text that is long enough to have a header....";
  }
  EXPECT_THROW(ResultsStore store(path("junk.db")), DbError);
}

TEST_F(DbTest, SyntaxErrorsNameTheSql) {
  Connection db(path("s.db"));
  try {
    db.prepare("SELEC 1");
    FAIL();
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("SELEC 1"), std::string::npos);
  }
}

}  // namespace
}  // namespace ka::db
