// Several processes on one database: creating it at once, writing past another's long lock,
// and the runs a killed process leaves behind. Uses fork(): each child is a separate SQLite
// client, as separate ka-tune / ka-bench / ka-db processes are.
#include <ka/core/error.hpp>
#include <ka/db/queries.hpp>
#include <ka/db/results_store.hpp>
#include <ka/db/run_liveness.hpp>
#include <ka/db/schema.hpp>

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace ka::db {
namespace {
namespace fs = std::filesystem;

RunInfo run_info(const std::string& tool) {
  RunInfo info;
  info.tool = tool;
  info.command_line = tool;
  info.host = "h";
  info.ka_version = "0";
  info.git_sha = "abc";
  info.device = "cpu";
  info.fingerprint = "cpu|x";
  info.fingerprint_json = "{}";
  return info;
}

ResultRow result_row(const std::string& name) {
  ResultRow r;
  r.suite = "s";
  r.case_name = name;
  r.impl = "ka";
  r.benchmark_name = "s/" + name + "/ka";
  r.op = "aten::mm";
  r.shape_key = "aten::mm(f32[1,1]c,f32[1,1]c)";
  r.dtype = "float32";
  r.median_ns = 1.0;
  return r;
}

std::int64_t count(Connection& db, const std::string& sql) {
  auto st = db.prepare(sql);
  st.step();
  return st.column_int64(0);
}

std::string text(Connection& db, const std::string& sql) {
  auto st = db.prepare(sql);
  std::string out;
  while (st.step()) out += st.column_text(0) + "\n";
  return out;
}

// Forks a child running `body`; the child exits 0 when it returns, 1 (after printing the
// error) when it throws. The child waits until a byte arrives on `go` when go >= 0.
pid_t spawn(const std::function<void()>& body, int go = -1) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  int code = 0;
  try {
    if (go >= 0) {
      char c = 0;
      if (::read(go, &c, 1) != 1) std::_Exit(3);
    }
    body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child %d: %s\n", static_cast<int>(::getpid()), e.what());
    code = 1;
  }
  std::fflush(stderr);
  std::_Exit(code);
}

int wait_exit(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

class ConcurrencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ka_concurrency_test_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    ::unsetenv("KA_DB_BUSY_TIMEOUT_MS");
    fs::remove_all(dir_);
  }
  [[nodiscard]] std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

// See Note [Race-free migration]. Before it, 10 of 32 such starts failed with "table runs
// already exists".
TEST_F(ConcurrencyTest, ManyProcessesCreateOneNewDatabaseAtOnce) {
  constexpr int kProcesses = 24;
  const std::string db_path = path("new.db");
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::vector<pid_t> children;
  for (int i = 0; i < kProcesses; ++i) {
    children.push_back(spawn(
        [&db_path, i] {
          ResultsStore store(db_path);
          const auto run = store.begin_run(run_info("p" + std::to_string(i)));
          store.add_results(run, {result_row("c" + std::to_string(i))});
          store.finish_run(run, true);
        },
        go[0]));
  }
  ::close(go[0]);
  // Releases every child at once: each reads one byte.
  const std::string bytes(kProcesses, 'x');
  ASSERT_EQ(::write(go[1], bytes.data(), bytes.size()), static_cast<ssize_t>(kProcesses));
  ::close(go[1]);
  int failures = 0;
  for (const pid_t pid : children) failures += wait_exit(pid) != 0;
  std::printf("%d processes created one new database at once: %d failed\n", kProcesses,
              failures);
  EXPECT_EQ(failures, 0);
  Connection db(db_path, Connection::Mode::kReadOnly);
  EXPECT_EQ(db.user_version(), kSchemaVersion);
  EXPECT_EQ(count(db, "SELECT count(*) FROM runs WHERE status = 'complete'"), kProcesses);
  EXPECT_EQ(count(db, "SELECT count(DISTINCT benchmark_name) FROM results"), kProcesses);
  EXPECT_EQ(count(db, "SELECT count(*) FROM results"), kProcesses);
  EXPECT_NO_THROW(check_database(db));
}

// A process holding the write lock (as a long `ka-db merge` does) for `hold_ms`. Returns the
// child's pid once it holds the lock.
pid_t hold_write_lock(const std::string& db_path, int hold_ms) {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  const pid_t pid = spawn([&] {
    ::close(ready[0]);
    Connection db(db_path);
    Transaction tx(db);
    db.exec("INSERT INTO devices (fingerprint, fields_json, first_seen, last_seen) VALUES "
            "('held', '{}', 't', 't')");
    if (::write(ready[1], "r", 1) != 1) std::_Exit(4);
    std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
    tx.commit();
  });
  ::close(ready[1]);
  char c = 0;
  const bool held = ::read(ready[0], &c, 1) == 1;
  ::close(ready[0]);
  return held ? pid : -1;
}

// See Note [Waiting for the write lock].
TEST_F(ConcurrencyTest, AWriterWaitsForALongLockAndItsRowLandsOnce) {
  const std::string db_path = path("locked.db");
  ResultsStore store(db_path);
  const auto run = store.begin_run(run_info("ka-bench"));
  constexpr int kHoldMs = 1500;
  const pid_t holder = hold_write_lock(db_path, kHoldMs);
  ASSERT_GT(holder, 0);
  const auto start = std::chrono::steady_clock::now();
  store.add_results(run, {result_row("waited")});
  const double waited_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(wait_exit(holder), 0);
  std::printf("a write behind a %d ms lock landed after %.2f s\n", kHoldMs, waited_s);
  EXPECT_GT(waited_s, 1.0) << "the write did not wait for the lock";
  Connection& db = store.connection();
  EXPECT_EQ(count(db, "SELECT count(*) FROM results WHERE case_name = 'waited'"), 1);
  EXPECT_EQ(count(db, "SELECT count(*) FROM devices WHERE fingerprint = 'held'"), 1);
}

TEST_F(ConcurrencyTest, TheWaitIsBoundedByKaDbBusyTimeoutMs) {
  const std::string db_path = path("bounded.db");
  { ResultsStore create(db_path); }
  ::setenv("KA_DB_BUSY_TIMEOUT_MS", "200", 1);
  ResultsStore store(db_path);
  const pid_t holder = hold_write_lock(db_path, 1000);
  ASSERT_GT(holder, 0);
  const auto start = std::chrono::steady_clock::now();
  try {
    store.begin_run(run_info("ka-tune"));
    ADD_FAILURE() << "wrote through another process's lock";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find(db_path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("database is locked"), std::string::npos) << e.what();
  }
  const double waited_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(waited_s, 0.19);
  EXPECT_LT(waited_s, 1.5);
  EXPECT_EQ(wait_exit(holder), 0);
  EXPECT_EQ(count(store.connection(), "SELECT count(*) FROM runs"), 0);
}

TEST_F(ConcurrencyTest, KaDbBusyTimeoutMsIsValidated) {
  for (const char* bad : {"abc", "-1", "1.5", "86400001", "1e3"}) {
    ::setenv("KA_DB_BUSY_TIMEOUT_MS", bad, 1);
    try {
      Connection db(path("x.db"));
      ADD_FAILURE() << bad << " accepted";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("KA_DB_BUSY_TIMEOUT_MS='") + bad + "'"),
                std::string::npos)
          << e.what();
    }
  }
  ::setenv("KA_DB_BUSY_TIMEOUT_MS", "0", 1);
  EXPECT_EQ(busy_timeout_ms(), 0);
  ::unsetenv("KA_DB_BUSY_TIMEOUT_MS");
  EXPECT_EQ(busy_timeout_ms(), kDefaultBusyTimeoutMs);
}

// See Note [Abandoned runs].
TEST_F(ConcurrencyTest, RunsOfKilledProcessesAreMarkedAbandoned) {
  const std::string db_path = path("runs.db");
  { ResultsStore create(db_path); }
  // A tool killed mid-run: begin_run, then SIGKILL.
  const pid_t killed = spawn([&db_path] {
    ResultsStore store(db_path);
    store.begin_run(run_info("killed"));
    ::raise(SIGKILL);
  });
  EXPECT_EQ(wait_exit(killed), 128 + SIGKILL);
  // A run still in progress: this process's own.
  ResultsStore store(db_path);
  const auto live = store.begin_run(run_info("live"));
  Connection& db = store.connection();
  const ProcessIdentity me = this_process();
  ASSERT_FALSE(me.host_boot.empty());
  ASSERT_EQ(process_start_ticks(me.pid), me.start_ticks);
  // A reused pid: this process's pid with another start time.
  const auto reused = store.begin_run(run_info("reused"));
  db.prepare("UPDATE runs SET pid_start = pid_start + 1 WHERE id = ?").bind(1, reused).run();
  // A run of another machine whose pid happens to be gone here.
  const auto other = store.begin_run(run_info("other host"));
  db.prepare("UPDATE runs SET host_boot = 'elsewhere 0000', pid = 999999999 WHERE id = ?")
      .bind(1, other)
      .run();
  // A run written before schema 3: no writer recorded.
  const auto old = store.begin_run(run_info("old"));
  db.prepare("UPDATE runs SET pid = NULL, pid_start = NULL, host_boot = NULL WHERE id = ?")
      .bind(1, old)
      .run();

  ResultsStore next(db_path);  // the next tool to open the database for writing
  EXPECT_EQ(text(db, "SELECT tool || ' ' || status || ' ' || (finished_at IS NOT NULL) FROM runs "
                     "ORDER BY id"),
            "killed abandoned 1\nlive running 0\nreused abandoned 1\nother host running 0\n"
            "old running 0\n");
  EXPECT_EQ(mark_abandoned_runs(next.connection()), 0U) << "marking twice";
  // Listing runs (ka-db show) shows the status.
  const auto runs = list_runs(db);
  ASSERT_EQ(runs.size(), 5U);
  EXPECT_EQ(runs[0].status, "abandoned");
  EXPECT_EQ(runs[static_cast<std::size_t>(live - 1)].status, "running");
}

TEST(ProcessStartTicks, NamesLiveProcessesOnly) {
  EXPECT_FALSE(process_start_ticks(0).has_value());
  EXPECT_FALSE(process_start_ticks(-5).has_value());
  const pid_t child = spawn([] {});
  ASSERT_GT(child, 0);
  EXPECT_EQ(wait_exit(child), 0);
  EXPECT_FALSE(process_start_ticks(child).has_value()) << "a reaped child is gone";
  EXPECT_TRUE(process_start_ticks(::getppid()).has_value());
}

// See Note [Rebuilding runs]. A version 2 database with runs, results and trials (and the
// foreign keys that cascade) keeps every row through the rebuild of `runs`.
TEST_F(ConcurrencyTest, VersionTwoMigratesWithEveryRowIntact) {
  const std::string db_path = path("v2.db");
  const std::string all_rows =
      "SELECT 'run', id, status, tool, host, threads FROM runs UNION ALL "
      "SELECT 'result', id, run_id, case_name, median_ns, disposition FROM results UNION ALL "
      "SELECT 'trial', id, run_id, config, median_ns, created_at FROM trials UNION ALL "
      "SELECT 'device', id, fingerprint, fields_json, first_seen, last_seen FROM devices "
      "UNION ALL SELECT 'rec', id, shape_key, config, median_ns, source_run FROM recommendations";
  auto dump = [&all_rows](Connection& db) {
    auto st = db.prepare(all_rows + " ORDER BY 1, 2");
    std::string out;
    while (st.step()) {
      for (int i = 0; i < 6; ++i) out += st.column_text(i) + "|";
      out += "\n";
    }
    return out;
  };
  std::string before;
  {
    Connection db(db_path);
    detail::migrate_to(db, 2);
    ASSERT_EQ(db.user_version(), 2);
    Transaction tx(db);
    for (int r = 1; r <= 3; ++r) {
      db.exec("INSERT INTO runs (id, started_at, status, tool, command_line, host, ka_version, "
              "git_sha, device, fingerprint, fingerprint_json, threads) VALUES (" +
              std::to_string(r * 10) + ", 't', '" + (r == 3 ? "running" : "complete") +
              "', 'ka-tune', 'c', 'h', '0', 'abc', 'cpu', 'cpu|x', '{}', " + std::to_string(r) +
              ")");
      for (int i = 0; i < 4; ++i) {
        const std::string n = std::to_string(r * 100 + i);
        db.exec("INSERT INTO results (run_id, suite, case_name, impl, benchmark_name, op, "
                "shape_key, dtype, disposition, median_ns) VALUES (" +
                std::to_string(r * 10) + ", 's', 'c" + n + "', 'ka', 's/c" + n +
                "/ka', 'aten::mm', 'k', 'float32', 'ok', " + n + ".5)");
        db.exec("INSERT INTO trials (run_id, op, shape_key, kernel, kernel_version, config, "
                "disposition, median_ns, created_at) VALUES (" +
                std::to_string(r * 10) + ", 'aten::mm', 'k', 'gemm', 1, 'cfg" + n + "', 'ok', " +
                n + ", 't" + n + "')");
      }
    }
    db.exec("INSERT INTO devices (fingerprint, fields_json, first_seen, last_seen) VALUES "
            "('cpu|x', '{}', 't', 't')");
    db.exec("INSERT INTO recommendations (fingerprint, op, shape_key, kernel, kernel_version, "
            "config, median_ns, source_run, created_at) VALUES ('cpu|x', 'aten::mm', '*', "
            "'gemm', 1, 'cfg', 1.5, 20, 't')");
    tx.commit();
    before = dump(db);
    EXPECT_THROW(db.exec("UPDATE runs SET status = 'abandoned' WHERE id = 30"), DbError)
        << "version 2 already allowed 'abandoned'";
  }
  ResultsStore store(db_path);
  Connection& db = store.connection();
  EXPECT_EQ(db.user_version(), kSchemaVersion);
  EXPECT_EQ(dump(db), before);
  EXPECT_EQ(count(db, "SELECT count(*) FROM results"), 12);
  EXPECT_EQ(count(db, "SELECT count(*) FROM trials"), 12);
  EXPECT_EQ(count(db, "SELECT count(*) FROM pragma_foreign_key_check"), 0);
  EXPECT_EQ(count(db, "SELECT count(*) FROM pragma_foreign_keys WHERE foreign_keys = 1"), 1)
      << "foreign keys were left off";
  // The rebuilt table is the one a new database gets, and the cascade still works.
  EXPECT_NO_THROW(check_database(db));
  db.exec("UPDATE runs SET status = 'abandoned' WHERE id = 30");
  db.exec("DELETE FROM runs WHERE id = 10");
  EXPECT_EQ(count(db, "SELECT count(*) FROM results"), 8);
  EXPECT_EQ(count(db, "SELECT count(*) FROM trials"), 8);
  // The pre-3 'running' run has no writer recorded: it is never marked.
  EXPECT_EQ(count(db, "SELECT count(*) FROM runs WHERE pid IS NULL"), 2);
}

}  // namespace
}  // namespace ka::db
