// Database files ka did not write: each hostile kind is refused, naming the file and the
// problem, by every way ka opens a database, without a hang and without changing a byte of the
// file. See Note [Checked databases] and Note [Hardened connections].
#include <ka/core/error.hpp>
#include <ka/core/shape_key.hpp>
#include <ka/db/recommendation_io.hpp>
#include <ka/db/recommendation_table.hpp>
#include <ka/db/results_store.hpp>
#include <ka/db/schema.hpp>
#include <ka/db/table_ops.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace ka::db {
namespace {
namespace fs = std::filesystem;

const std::string kFp = "cpu|Hostile CPU|avx2|cores=2";
const KernelVersions kVersions = {{"gemm_a", 1}};

std::string mm_key(std::int64_t m) {
  const TensorSpec a{DType::kFloat32, {m, 8}, true};
  const TensorSpec b{DType::kFloat32, {8, 8}, true};
  return ShapeKey("aten::mm", {a, b}).str();
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// One kind of hostile file: made from a copy of a good database by `make`; a refusal's
// message must contain `problem`.
struct Hostile {
  std::string name;
  std::function<void(const std::string& path)> make;
  std::vector<std::string> problem;  // any one of these
};

void edit(const std::string& path, const std::string& sql) {
  Connection db(path);
  db.exec(sql);
}

const std::string kRecommendationColumns =
    "id, fingerprint, op, shape_key, kernel, kernel_version, config, fusion, median_ns, "
    "gain_over_default, source_run, created_at";

std::vector<Hostile> hostile_kinds() {
  return {
      {"trigger_on_trials",
       [](const std::string& p) {
         edit(p, "CREATE TRIGGER wipe AFTER INSERT ON trials BEGIN DELETE FROM trials; END");
       },
       {"holds the trigger 'wipe'"}},
      {"trigger_on_results",
       [](const std::string& p) {
         edit(p,
              "CREATE TRIGGER fake AFTER INSERT ON results BEGIN UPDATE results SET median_ns = "
              "1, gflops = 1e9; END");
       },
       {"holds the trigger 'fake'"}},
      {"view_shadowing_a_table",
       [](const std::string& p) {
         edit(p,
              "ALTER TABLE recommendations RENAME TO recommendations_real; CREATE VIEW "
              "recommendations AS SELECT " +
                  kRecommendationColumns + " FROM recommendations_real WHERE 0");
       },
       {"holds the view 'recommendations'"}},
      {"recursive_view",
       [](const std::string& p) {
         edit(p,
              "ALTER TABLE recommendations RENAME TO recommendations_real; CREATE VIEW "
              "recommendations AS WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM "
              "n) SELECT x AS id, '" +
                  kFp +
                  "' AS fingerprint, 'aten::mm' AS op, '*' AS shape_key, 'gemm_a' AS kernel, 1 "
                  "AS kernel_version, 'grid=1x1x1 block=1x1x1' AS config, NULL AS fusion, 1.0 AS "
                  "median_ns, 1.0 AS gain_over_default, NULL AS source_run, 't' AS created_at "
                  "FROM n");
       },
       {"holds the view 'recommendations'"}},
      {"corrupt_page",
       [](const std::string& p) {
         std::string bytes = read_bytes(p);
         const std::size_t page = 4096;
         const std::size_t middle = bytes.size() / page / 2 * page;
         ASSERT_GT(bytes.size() / page, 8U) << "the good database is too small to damage";
         for (std::size_t i = middle; i < middle + page; ++i) bytes[i] = '\x5a';
         write_bytes(p, bytes);
       },
       {"is damaged", "malformed"}},
      {"truncated",
       [](const std::string& p) { fs::resize_file(p, fs::file_size(p) / 2 / 4096 * 4096 + 100); },
       {"is damaged", "malformed"}},
      {"future_user_version",
       [](const std::string& p) {
         edit(p, "PRAGMA user_version = " + std::to_string(kSchemaVersion + 1));
       },
       {"schema version " + std::to_string(kSchemaVersion + 1) +
        " is newer than this ka supports"}},
      {"wrong_column_types",
       [](const std::string& p) {
         // CREATE TABLE ... AS SELECT declares INT, REAL, TEXT, NUM: not ka's INTEGER.
         edit(p,
              "CREATE TABLE copy AS SELECT * FROM recommendations; DROP TABLE recommendations; "
              "ALTER TABLE copy RENAME TO recommendations");
       },
       {"table 'recommendations' column 1 is 'id' INT where schema version " + std::to_string(kSchemaVersion) + " has 'id' INTEGER "
        "PRIMARY KEY"}},
      {"missing_table",
       [](const std::string& p) { edit(p, "DROP TABLE trials"); },
       {"table 'trials' of schema version " + std::to_string(kSchemaVersion) + " is missing"}},
      {"not_a_database",
       [](const std::string& p) {
         std::string text;
         for (int i = 0; i < 300; ++i) text += "this is a text file, not a database\n";
         write_bytes(p, text);
       },
       {"file is not a database"}},
  };
}

// One way ka opens a database, given the path of the (hostile) file and of a good one.
struct EntryPoint {
  std::string name;
  std::function<void(const std::string& file, const std::string& good, const fs::path& dir)>
      open;
};

std::vector<EntryPoint> entry_points() {
  return {
      // ka-bench --db and ka-tune --db (and fusion tuning) open the database through this.
      {"ResultsStore (ka-bench/ka-tune --db)",
       [](const std::string& f, const std::string&, const fs::path&) { ResultsStore store(f); }},
      {"RecommendationTable::load (--tuned-table, KA_TUNED_TABLE, ka-db export)",
       [](const std::string& f, const std::string&, const fs::path&) {
         (void)RecommendationTable::load(f, kFp, kVersions);
       }},
      {"ka-db import source",
       [](const std::string& f, const std::string&, const fs::path& dir) {
         Connection target((dir / "import_target.db").string());
         migrate(target);
         import_sqlite(f, target, kFp, kVersions);
       }},
      {"ka-db import target (--db)",
       [](const std::string& f, const std::string& good, const fs::path&) {
         Connection target(f);
         migrate(target);
         import_sqlite(good, target, kFp, kVersions);
       }},
      {"ka-db merge source",
       [](const std::string& f, const std::string&, const fs::path& dir) {
         Connection target((dir / "merge_target.db").string());
         merge_databases(target, {f});
       }},
      {"ka-db merge target (--into)",
       [](const std::string& f, const std::string& good, const fs::path&) {
         Connection target(f);
         merge_databases(target, {good});
       }},
      {"ka-db diff A",
       [](const std::string& f, const std::string& good, const fs::path&) {
         (void)diff_databases(f, good, kFp, 0.03);
       }},
      {"ka-db diff B",
       [](const std::string& f, const std::string& good, const fs::path&) {
         (void)diff_databases(good, f, kFp, 0.03);
       }},
      {"ka-db show",
       [](const std::string& f, const std::string&, const fs::path&) {
         (void)open_for_reading(f);
       }},
  };
}

class HostileFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ka_hostile_test_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    make_good(path("good.db"));
  }
  void TearDown() override { fs::remove_all(dir_); }
  [[nodiscard]] std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A real ka database: a run with results and enough trials for a few dozen pages, a device
  // and recommendations this build (kVersions) can use.
  static void make_good(const std::string& file) {
    ResultsStore store(file);
    RunInfo info;
    info.tool = "ka-tune";
    info.command_line = "ka-tune";
    info.host = "h";
    info.ka_version = "0";
    info.git_sha = "abc";
    info.device = "cpu";
    info.fingerprint = kFp;
    info.fingerprint_json = "{}";
    const std::int64_t run = store.begin_run(info);
    std::vector<TrialRow> trials;
    std::vector<Recommendation> recs;
    for (int m = 1; m <= 400; ++m) {
      TrialRow t;
      t.op = "aten::mm";
      t.shape_key = mm_key(m);
      t.kernel = "gemm_a";
      t.kernel_version = 1;
      t.config = "grid=" + std::to_string(m) + "x1x1 block=1x1x1";
      t.median_ns = 100.0 + m;
      t.ci95_ns = 1.0;
      t.repetitions = 10;
      trials.push_back(t);
      if (m % 40 == 0) {
        Recommendation r;
        r.fingerprint = kFp;
        r.op = t.op;
        r.shape_key = t.shape_key;
        r.kernel = t.kernel;
        r.kernel_version = 1;
        r.config.grid = {m, 1, 1};
        r.median_ns = *t.median_ns;
        r.source_run = run;
        recs.push_back(r);
      }
    }
    store.add_trials(run, trials);
    ResultRow result;
    result.suite = "s";
    result.case_name = "c";
    result.impl = "ka";
    result.benchmark_name = "s/c/ka";
    result.op = "aten::mm";
    result.shape_key = mm_key(1);
    result.dtype = "float32";
    result.median_ns = 5.0;
    store.add_results(run, {result});
    store.put_recommendations(recs);
    store.finish_run(run, true);
  }

  fs::path dir_;
  std::vector<EntryPoint> entry_points_;
};

// Note [Hostile-file matrix]
// Every kind of hostile file x every entry point: refused (ka::DbError naming the file and the
// problem), within a few seconds, the file's bytes unchanged. The matrix is printed so a run
// shows what was covered.
TEST_F(HostileFileTest, EveryKindIsRefusedByEveryEntryPoint) {
  const std::string good = path("good.db");
  const std::string good_bytes = read_bytes(good);
  int refused = 0;
  int cells = 0;
  entry_points_ = entry_points();
  for (const Hostile& kind : hostile_kinds()) {
    for (const EntryPoint& entry : entry_points_) {
      SCOPED_TRACE(kind.name + " x " + entry.name);
      ++cells;
      const fs::path cell = dir_ / ("cell_" + std::to_string(cells));
      fs::create_directories(cell);
      const std::string file = (cell / (kind.name + ".db")).string();
      fs::copy_file(good, file);
      kind.make(file);
      const std::string before = read_bytes(file);
      const auto start = std::chrono::steady_clock::now();
      std::string message;
      try {
        entry.open(file, good, cell);
      } catch (const DbError& e) {
        message = e.what();
      }
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      EXPECT_LT(seconds, 5.0) << "a refusal must not hang";
      ASSERT_FALSE(message.empty()) << "accepted";
      EXPECT_NE(message.find(file), std::string::npos) << "the file is not named: " << message;
      bool named = false;
      for (const std::string& p : kind.problem) {
        named = named || message.find(p) != std::string::npos;
      }
      EXPECT_TRUE(named) << "the problem is not named: " << message;
      EXPECT_TRUE(read_bytes(file) == before) << "the refused file was changed";
      refused += !message.empty() && named && read_bytes(file) == before;
      std::printf("%-24s x %-70s refused\n", kind.name.c_str(), entry.name.c_str());
      if (&entry == &entry_points_.front()) std::printf("  %s\n", message.c_str());
    }
  }
  EXPECT_EQ(refused, cells);
  std::printf("hostile files: %d of %d (kind x entry point) refused, bytes unchanged\n", refused,
              cells);
  EXPECT_TRUE(read_bytes(good) == good_bytes) << "a good source file was changed";
}

TEST_F(HostileFileTest, TheGoodDatabasePassesEveryEntryPoint) {
  // The same entry points accept the database the hostile ones were made from, so a refusal
  // above is the hostile change, not the test's own file.
  const std::string good = path("good.db");
  for (const EntryPoint& entry : entry_points()) {
    SCOPED_TRACE(entry.name);
    const std::string file = path("copy.db");
    fs::remove(file);
    fs::copy_file(good, file);
    fs::create_directories(dir_ / "ok");
    EXPECT_NO_THROW(entry.open(file, good, dir_ / "ok"));
    fs::remove_all(dir_ / "ok");
  }
}

TEST_F(HostileFileTest, HardeningKeepsTriggersAndViewsInertEvenUnchecked) {
  // Bypassing the checks (a plain Connection), the db_config switches alone stop a trigger
  // from firing, a view from being read (the recursive one would never end) and SQL from
  // loading an extension. See Note [Hardened connections].
  const std::string file = path("good.db");
  edit(file,
       "CREATE TRIGGER wipe AFTER INSERT ON devices BEGIN DELETE FROM trials; END; "
       "CREATE VIEW forever AS WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) "
       "SELECT x FROM n; CREATE VIEW plain AS SELECT 1 AS x");
  Connection db(file);
  auto count = [&db](const std::string& sql) {
    auto st = db.prepare(sql);
    st.step();
    return st.column_int64(0);
  };
  const std::int64_t trials = count("SELECT count(*) FROM trials");
  ASSERT_EQ(trials, 400);
  db.exec("INSERT INTO devices (fingerprint, fields_json, first_seen, last_seen) VALUES ('x', "
          "'{}', 't', 't')");
  EXPECT_EQ(count("SELECT count(*) FROM trials"), trials) << "the trigger fired";
  try {
    (void)count("SELECT count(*) FROM plain");
    ADD_FAILURE() << "a view was read";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("access to view \"plain\" prohibited"),
              std::string::npos)
        << e.what();
  }
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW((void)count("SELECT count(*) FROM forever"), DbError) << "a view was read";
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
  try {
    (void)count("SELECT load_extension('/nonexistent/evil.so')");
    ADD_FAILURE() << "load_extension ran";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("not authorized"), std::string::npos) << e.what();
  }
  try {
    db.exec("PRAGMA writable_schema = ON; UPDATE sqlite_master SET sql = 'x'");
    ADD_FAILURE() << "defensive mode is off: sqlite_master was writable";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("sqlite_master"), std::string::npos) << e.what();
  }
}

TEST_F(HostileFileTest, AnEmptyFileIsJustCreatedAndMigrated) {
  const std::string file = path("empty.db");
  write_bytes(file, "");
  ResultsStore store(file);
  EXPECT_EQ(store.connection().user_version(), kSchemaVersion);
}

TEST_F(HostileFileTest, AForeignSqliteDatabaseIsNotTakenOver) {
  // A version 0 file with tables of its own is someone else's database, not a new one.
  const std::string file = path("other.db");
  edit(file, "CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('mine')");
  const std::string before = read_bytes(file);
  try {
    ResultsStore store(file);
    FAIL() << "a foreign database was migrated";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a ka database (schema version 0, yet it holds "
                                          "'notes')"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(read_bytes(file) == before);
}

}  // namespace
}  // namespace ka::db
