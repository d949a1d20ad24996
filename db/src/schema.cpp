#include <ka/core/error.hpp>
#include <ka/core/logging.hpp>
#include <ka/db/run_liveness.hpp>
#include <ka/db/schema.hpp>

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace ka::db {
namespace {

// Each entry takes the schema from version i to i + 1. Never edit a released step: add one.
constexpr const char* kMigrations[] = {
    // 0 -> 1: runs and per-benchmark results.
    R"sql(
CREATE TABLE runs (
  id                 INTEGER PRIMARY KEY,
  started_at         TEXT NOT NULL,            -- ISO 8601, UTC
  finished_at        TEXT,
  status             TEXT NOT NULL CHECK (status IN ('running', 'complete', 'failed')),
  tool               TEXT NOT NULL,            -- ka-bench, ka-tune
  command_line       TEXT NOT NULL,
  host               TEXT NOT NULL,
  ka_version         TEXT NOT NULL,
  git_sha            TEXT NOT NULL,
  suite              TEXT,
  device             TEXT NOT NULL,            -- cpu, cuda:0
  fingerprint        TEXT NOT NULL,            -- DeviceFingerprint::key()
  fingerprint_json   TEXT NOT NULL,
  threads            INTEGER NOT NULL,
  fma_peak_gflops    REAL,                     -- measured fp32 FMA peak at `threads` threads
  fma_peak_1t_gflops REAL,                     -- ... and on one thread
  libtorch_version   TEXT,
  openblas_coretype  TEXT,                     -- OPENBLAS_CORETYPE as set for the run ('' = unset)
  openblas_core      TEXT                      -- the kernel OpenBLAS reports it uses
);
CREATE TABLE results (
  id              INTEGER PRIMARY KEY,
  run_id          INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  suite           TEXT NOT NULL,
  case_name       TEXT NOT NULL,
  impl            TEXT NOT NULL,               -- ka, libtorch, ...
  benchmark_name  TEXT NOT NULL,               -- <suite>/<case>/<impl>
  op              TEXT NOT NULL,
  shape_key       TEXT NOT NULL,
  m               INTEGER,
  n               INTEGER,
  k               INTEGER,
  dtype           TEXT NOT NULL,
  kernel          TEXT,                        -- kernel name (ka) or library (libtorch)
  kernel_version  INTEGER,
  config          TEXT,                        -- LaunchConfig canonical form
  disposition     TEXT NOT NULL
                  CHECK (disposition IN ('ok', 'failed', 'timeout', 'incorrect', 'unsupported')),
  error           TEXT,
  max_abs_error   REAL,                        -- vs the reference, when checked
  cache_state     TEXT NOT NULL DEFAULT 'hot', -- hot (back-to-back) or cold (flushed)
  repetitions     INTEGER,
  iterations      INTEGER,                     -- per repetition
  median_ns       REAL,                        -- median over repetitions of per-call time
  mean_ns         REAL,
  min_ns          REAL,
  max_ns          REAL,
  stddev_ns       REAL,
  gflops          REAL,                        -- from median_ns
  pct_peak        REAL,                        -- gflops / fma_peak_gflops * 100
  UNIQUE (run_id, benchmark_name)
);
CREATE INDEX results_by_shape ON results (shape_key, impl);
)sql",
    // 1 -> 2: devices, tuning trials and the recommendation table (DESIGN.md §7).
    // See Note [Recommendation rows].
    R"sql(
CREATE TABLE devices (
  id           INTEGER PRIMARY KEY,
  fingerprint  TEXT NOT NULL UNIQUE,           -- DeviceFingerprint::key()
  fields_json  TEXT NOT NULL,                  -- DeviceFingerprint::fields() as a JSON object
  first_seen   TEXT NOT NULL,                  -- ISO 8601, UTC
  last_seen    TEXT NOT NULL
);
CREATE TABLE trials (
  id              INTEGER PRIMARY KEY,
  run_id          INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  op              TEXT NOT NULL,               -- operator overload or fusion pattern
  shape_key       TEXT NOT NULL,               -- ShapeKey canonical form
  kernel          TEXT NOT NULL,
  kernel_version  INTEGER NOT NULL,
  config          TEXT NOT NULL,               -- LaunchConfig canonical form
  disposition     TEXT NOT NULL
                  CHECK (disposition IN ('ok', 'failed', 'timeout', 'incorrect', 'unsupported')),
  error           TEXT,
  median_ns       REAL,
  mean_ns         REAL,
  min_ns          REAL,
  max_ns          REAL,
  stddev_ns       REAL,
  ci95_ns         REAL,                        -- half-width of the 95% confidence interval
  repetitions     INTEGER,
  cache_state     TEXT NOT NULL DEFAULT 'hot' CHECK (cache_state IN ('hot', 'cold')),
  created_at      TEXT NOT NULL,
  -- A resumed sweep re-inserting a trial updates it instead of adding a second row.
  UNIQUE (run_id, shape_key, kernel, config)
);
CREATE INDEX trials_by_shape ON trials (op, shape_key, kernel, kernel_version);
CREATE TABLE recommendations (
  id                 INTEGER PRIMARY KEY,
  fingerprint        TEXT NOT NULL REFERENCES devices(fingerprint),
  op                 TEXT NOT NULL,            -- operator overload or fusion pattern
  shape_key          TEXT NOT NULL,            -- ShapeKey canonical form; '*' = the op's default
  kernel             TEXT NOT NULL,
  kernel_version     INTEGER NOT NULL,
  config             TEXT NOT NULL,            -- LaunchConfig canonical form
  fusion             TEXT,                     -- measured fusion decision; NULL = none
  median_ns          REAL,                     -- median of the winning trial
  gain_over_default  REAL,                     -- default config's median / this median
  source_run         INTEGER,                  -- runs.id in the database that tuned it
  created_at         TEXT NOT NULL,
  UNIQUE (fingerprint, op, shape_key, kernel)
);
CREATE INDEX recommendations_by_kernel ON recommendations (kernel, kernel_version);
)sql",
    // 2 -> 3: runs record their writer (pid, its start time, host and boot) and may be
    // 'abandoned'. SQLite cannot change a CHECK in place, so `runs` is rebuilt, keeping every
    // id; see Note [Rebuilding runs].
    R"sql(
CREATE TABLE runs_v3 (
  id                 INTEGER PRIMARY KEY,
  started_at         TEXT NOT NULL,            -- ISO 8601, UTC
  finished_at        TEXT,                     -- also stamped when marked abandoned
  status             TEXT NOT NULL
                     CHECK (status IN ('running', 'complete', 'failed', 'abandoned')),
  tool               TEXT NOT NULL,            -- ka-bench, ka-tune
  command_line       TEXT NOT NULL,
  host               TEXT NOT NULL,
  ka_version         TEXT NOT NULL,
  git_sha            TEXT NOT NULL,
  suite              TEXT,
  device             TEXT NOT NULL,            -- cpu, cuda:0
  fingerprint        TEXT NOT NULL,            -- DeviceFingerprint::key()
  fingerprint_json   TEXT NOT NULL,
  threads            INTEGER NOT NULL,
  fma_peak_gflops    REAL,                     -- measured fp32 FMA peak at `threads` threads
  fma_peak_1t_gflops REAL,                     -- ... and on one thread
  libtorch_version   TEXT,
  openblas_coretype  TEXT,                     -- OPENBLAS_CORETYPE as set for the run ('' = unset)
  openblas_core      TEXT,                     -- the kernel OpenBLAS reports it uses
  pid                INTEGER,                  -- the writing process; NULL for older runs
  pid_start          INTEGER,                  -- its start, clock ticks after boot (/proc stat 22)
  host_boot          TEXT                      -- '<hostname> <boot_id>' of the writer's machine
);
INSERT INTO runs_v3 (id, started_at, finished_at, status, tool, command_line, host, ka_version,
                     git_sha, suite, device, fingerprint, fingerprint_json, threads,
                     fma_peak_gflops, fma_peak_1t_gflops, libtorch_version, openblas_coretype,
                     openblas_core)
  SELECT id, started_at, finished_at, status, tool, command_line, host, ka_version, git_sha,
         suite, device, fingerprint, fingerprint_json, threads, fma_peak_gflops,
         fma_peak_1t_gflops, libtorch_version, openblas_coretype, openblas_core
  FROM runs;
DROP TABLE runs;
ALTER TABLE runs_v3 RENAME TO runs;
)sql",
    // 3 -> 4: the disposition 'crashed' (a trial or case whose worker process died). SQLite
    // cannot alter a CHECK constraint, so both tables are rebuilt; nothing references them.
    R"sql(
CREATE TABLE results_v4 (
  id              INTEGER PRIMARY KEY,
  run_id          INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  suite           TEXT NOT NULL,
  case_name       TEXT NOT NULL,
  impl            TEXT NOT NULL,               -- ka, libtorch, ...
  benchmark_name  TEXT NOT NULL,               -- <suite>/<case>/<impl>
  op              TEXT NOT NULL,
  shape_key       TEXT NOT NULL,
  m               INTEGER,
  n               INTEGER,
  k               INTEGER,
  dtype           TEXT NOT NULL,
  kernel          TEXT,                        -- kernel name (ka) or library (libtorch)
  kernel_version  INTEGER,
  config          TEXT,                        -- LaunchConfig canonical form
  disposition     TEXT NOT NULL
                  CHECK (disposition IN ('ok', 'failed', 'timeout', 'incorrect', 'unsupported',
                                        'crashed')),
  error           TEXT,
  max_abs_error   REAL,                        -- vs the reference, when checked
  cache_state     TEXT NOT NULL DEFAULT 'hot', -- hot (back-to-back) or cold (flushed)
  repetitions     INTEGER,
  iterations      INTEGER,                     -- per repetition
  median_ns       REAL,                        -- median over repetitions of per-call time
  mean_ns         REAL,
  min_ns          REAL,
  max_ns          REAL,
  stddev_ns       REAL,
  gflops          REAL,                        -- from median_ns
  pct_peak        REAL,                        -- gflops / fma_peak_gflops * 100
  UNIQUE (run_id, benchmark_name)
);
INSERT INTO results_v4 SELECT * FROM results;
DROP TABLE results;
ALTER TABLE results_v4 RENAME TO results;
CREATE INDEX results_by_shape ON results (shape_key, impl);
CREATE TABLE trials_v4 (
  id              INTEGER PRIMARY KEY,
  run_id          INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  op              TEXT NOT NULL,               -- operator overload or fusion pattern
  shape_key       TEXT NOT NULL,               -- ShapeKey canonical form
  kernel          TEXT NOT NULL,
  kernel_version  INTEGER NOT NULL,
  config          TEXT NOT NULL,               -- LaunchConfig canonical form
  disposition     TEXT NOT NULL
                  CHECK (disposition IN ('ok', 'failed', 'timeout', 'incorrect', 'unsupported',
                                        'crashed')),
  error           TEXT,
  median_ns       REAL,
  mean_ns         REAL,
  min_ns          REAL,
  max_ns          REAL,
  stddev_ns       REAL,
  ci95_ns         REAL,                        -- half-width of the 95% confidence interval
  repetitions     INTEGER,
  cache_state     TEXT NOT NULL DEFAULT 'hot' CHECK (cache_state IN ('hot', 'cold')),
  created_at      TEXT NOT NULL,
  -- A resumed sweep re-inserting a trial updates it instead of adding a second row.
  UNIQUE (run_id, shape_key, kernel, config)
);
INSERT INTO trials_v4 SELECT * FROM trials;
DROP TABLE trials;
ALTER TABLE trials_v4 RENAME TO trials;
CREATE INDEX trials_by_shape ON trials (op, shape_key, kernel, kernel_version);
)sql",
    // 4 -> 5: claims on trials under way, so that concurrent sweeps of the same work measure
    // each configuration once (Note [Shared trials] in trial_claims.cpp). A claim is a row of
    // work in progress, never a result: merge, export and import ignore the table.
    R"sql(
CREATE TABLE trial_claims (
  fingerprint     TEXT NOT NULL,               -- DeviceFingerprint::key()
  op              TEXT NOT NULL,
  shape_key       TEXT NOT NULL,
  kernel          TEXT NOT NULL,
  kernel_version  INTEGER NOT NULL,
  cache_state     TEXT NOT NULL,
  config          TEXT NOT NULL,               -- LaunchConfig canonical form
  run_id          INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  claimed_at      REAL NOT NULL,               -- Unix time, seconds
  PRIMARY KEY (fingerprint, op, shape_key, kernel, kernel_version, cache_state, config)
);
CREATE INDEX trial_claims_by_run ON trial_claims (run_id);
)sql",
    // 5 -> 6: what ka-db report draws with. A run's memory roofs (the bandwidths ka-bench
    // probed before its first case) and a sweep's strategy; a result's FLOPs and the fewest
    // bytes the case must move (its arithmetic intensity); a recommendation's default time and
    // the interval of its gain. NULL where not measured or known, as in every older row.
    R"sql(
ALTER TABLE runs ADD COLUMN copy_gbps REAL;      -- STREAM-copy bandwidth, GB/s, at `threads`
ALTER TABLE runs ADD COLUMN read_gbps REAL;      -- streaming-read bandwidth, GB/s, at `threads`
ALTER TABLE runs ADD COLUMN strategy TEXT;       -- ka-tune's search strategy
ALTER TABLE results ADD COLUMN flop REAL;        -- floating-point operations of one call
ALTER TABLE results ADD COLUMN min_bytes REAL;   -- bytes one call must read and write at least
ALTER TABLE recommendations ADD COLUMN default_median_ns REAL;  -- the default config's, in the finals
ALTER TABLE recommendations ADD COLUMN gain_low REAL;   -- 95% interval of gain_over_default
ALTER TABLE recommendations ADD COLUMN gain_high REAL;
)sql",
};

// Note [Rebuilding runs]
// `results` and `trials` reference runs(id) ON DELETE CASCADE. With foreign keys on, DROP
// TABLE runs would first delete every run and cascade to every result and trial, so
// migrate_to() turns foreign keys off around its transaction (PRAGMA foreign_keys is a no-op
// inside one) and runs PRAGMA foreign_key_check before committing. The new table keeps the
// ids, so the references stay valid; ALTER TABLE ... RENAME leaves the other tables'
// "REFERENCES runs" text alone because it names the old table, now gone.

// Note [Recommendation rows]
// `recommendations.fingerprint` references `devices`, so every table names a device whose
// fields can be shown; writers add a device row when they meet a new fingerprint.
// `source_run` is deliberately not a foreign key: an exported table (a database holding
// only recommendations and their device row, see Note [Export files]) keeps the id of the
// run in the database that tuned it, which the exported file does not contain.
// Indices: UNIQUE (fingerprint, op, shape_key, kernel) serves per-device and per-op queries
// (show, export, the upsert itself); recommendations_by_kernel finds the rows a new kernel
// version makes stale; trials_by_shape serves winner selection and replay per shape, and
// UNIQUE (run_id, ...) a resumed sweep's "already measured?" check. RecommendationTable::load
// reads every row on purpose: it counts and logs the rows it must skip.

constexpr int kSteps = static_cast<int>(sizeof(kMigrations) / sizeof(kMigrations[0]));
static_assert(kSteps == kSchemaVersion, "one migration step per schema version");

}  // namespace

// Note [Checked databases]
// A database ka did not just create may come from anywhere (--db of an existing file,
// --tuned-table, KA_TUNED_TABLE, ka-db import, merge, diff and show), so before any row of it
// is read it must pass, in this order:
//  1. no trigger, view or virtual table in sqlite_master: ka creates none, a plain-SQL
//     trigger runs on ka's own writes even with trusted_schema off, a view can shadow a
//     table or recurse forever, and a virtual table runs a module's code;
//  2. PRAGMA user_version in [0, kSchemaVersion]: a file from the future is refused, never
//     migrated downwards, and a version 0 file must be empty (it is then "just created");
//  3. every table the migrations up to that version create, with the same columns in the same
//     order, declared types, NOT NULL, primary key and hidden (generated) flags, compared
//     with a reference schema built from kMigrations in an in-memory database;
//  4. PRAGMA quick_check returns "ok" (damaged pages, truncation, broken b-trees).
// Extra tables and indexes are allowed: they hold data ka never reads. The checks only read
// the file, so a refused file is left byte for byte as it was; migrate() checks before it
// switches the file to WAL mode, the first thing it writes.

namespace {

// One column as PRAGMA table_xinfo describes it.
using ColumnShape = std::tuple<std::string, std::string, int, int, int>;  // name, type, ...
using SchemaShape = std::map<std::string, std::vector<ColumnShape>>;       // table -> columns

std::vector<ColumnShape> columns_of(Connection& db, const std::string& table) {
  auto st = db.prepare(
      "SELECT name, type, \"notnull\", pk, hidden FROM pragma_table_xinfo(?) ORDER BY cid");
  st.bind(1, table);
  std::vector<ColumnShape> out;
  while (st.step()) {
    out.emplace_back(st.column_text(0), st.column_text(1), static_cast<int>(st.column_int64(2)),
                     static_cast<int>(st.column_int64(3)), static_cast<int>(st.column_int64(4)));
  }
  return out;
}

// The tables (and their columns) of each schema version, from kMigrations run in memory.
const std::vector<SchemaShape>& reference_shapes() {
  static const std::vector<SchemaShape> shapes = [] {
    std::vector<SchemaShape> out;
    Connection db(":memory:");
    for (int version = 0; version <= kSchemaVersion; ++version) {
      if (version > 0) db.exec(kMigrations[version - 1]);
      SchemaShape shape;
      auto st = db.prepare(
          "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' "
          "ESCAPE '\\'");
      while (st.step()) shape[st.column_text(0)];
      for (auto& [table, columns] : shape) columns = columns_of(db, table);
      out.push_back(std::move(shape));
    }
    return out;
  }();
  return shapes;
}

[[noreturn]] void refuse(const Connection& db, const std::string& problem) {
  // A refused file is closed without a checkpoint, so not even a leftover WAL of its own is
  // folded into it.
  sqlite3_db_config(db.handle(), SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  KA_THROW(DbError, db.path(), ": refusing this database: ", problem);
}

std::string describe(const ColumnShape& c) {
  const auto& [name, type, notnull, pk, hidden] = c;
  return ka::detail::str_cat("'", name, "' ", type.empty() ? "(no type)" : type,
                             notnull != 0 ? " NOT NULL" : "", pk != 0 ? " PRIMARY KEY" : "",
                             hidden != 0 ? " (generated or hidden)" : "");
}

void check_no_code(Connection& db) {
  auto st = db.prepare(
      "SELECT type, name FROM sqlite_master WHERE type IN ('trigger', 'view') OR "
      "(type = 'table' AND sql LIKE 'CREATE VIRTUAL TABLE%') ORDER BY type, name LIMIT 1");
  if (st.step()) {
    const std::string type = st.column_text(0) == "table" ? "virtual table" : st.column_text(0);
    refuse(db, ka::detail::str_cat(
                   "it holds the ", type, " '", st.column_text(1),
                   "'; ka never creates triggers, views or virtual tables, and would run them "
                   "on your data (remove it with the sqlite3 tool if the file is yours)"));
  }
}

bool has_no_tables(Connection& db) {
  auto st = db.prepare("SELECT count(*) FROM sqlite_master");
  st.step();
  return st.column_int64(0) == 0;
}

int checked_version(Connection& db) {
  const int version = db.user_version();
  if (version > kSchemaVersion) {
    refuse(db, ka::detail::str_cat("its schema version ", version,
                                   " is newer than this ka supports (", kSchemaVersion,
                                   "); use a newer ka or another file"));
  }
  if (version < 0) refuse(db, ka::detail::str_cat("bad schema version ", version));
  return version;
}

void check_tables(Connection& db, int version) {
  const SchemaShape& expected = reference_shapes()[static_cast<std::size_t>(version)];
  if (version == 0 && !has_no_tables(db)) {
    auto st = db.prepare("SELECT name FROM sqlite_master ORDER BY name LIMIT 1");
    st.step();
    refuse(db, ka::detail::str_cat("it is not a ka database (schema version 0, yet it holds '",
                                   st.column_text(0), "')"));
  }
  for (const auto& [table, columns] : expected) {
    auto st = db.prepare("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?");
    st.bind(1, table);
    st.step();
    if (st.column_int64(0) == 0) {
      refuse(db, ka::detail::str_cat("table '", table, "' of schema version ", version,
                                     " is missing"));
    }
    const std::vector<ColumnShape> actual = columns_of(db, table);
    for (std::size_t i = 0; i < std::max(actual.size(), columns.size()); ++i) {
      if (i < actual.size() && i < columns.size() && actual[i] == columns[i]) continue;
      refuse(db, ka::detail::str_cat(
                     "table '", table, "' column ", i + 1, " is ",
                     i < actual.size() ? describe(actual[i]) : std::string("missing"),
                     " where schema version ", version, " has ",
                     i < columns.size() ? describe(columns[i]) : std::string("no column")));
    }
  }
}

void check_integrity(Connection& db) {
  std::string problems;
  try {
    auto st = db.prepare("PRAGMA quick_check(3)");
    while (st.step()) {
      std::string line = st.column_text(0);
      if (line == "ok") break;
      // One line per problem, without the "*** in database main ***" heading.
      const std::string heading = "*** in database main ***";
      if (line.rfind(heading, 0) == 0) line.erase(0, heading.size());
      std::replace(line.begin(), line.end(), '\n', ' ');
      while (!line.empty() && line.front() == ' ') line.erase(0, 1);
      problems += (problems.empty() ? "" : "; ") + line;
    }
  } catch (const DbError& e) {
    problems = e.what();
  }
  if (!problems.empty()) refuse(db, "it is damaged (PRAGMA quick_check: " + problems + ")");
}

// The checks of Note [Checked databases] but the slow quick_check.
int check_schema(Connection& db) {
  check_no_code(db);
  const int version = checked_version(db);
  check_tables(db, version);
  return version;
}

// PRAGMA foreign_keys = OFF until destroyed. See Note [Rebuilding runs].
class ForeignKeysOff {
 public:
  explicit ForeignKeysOff(Connection& db) : db_(db) { db_.exec("PRAGMA foreign_keys = OFF"); }
  ~ForeignKeysOff() {
    try {
      db_.exec("PRAGMA foreign_keys = ON");
    } catch (const Error& e) {
      log().warn("{}", e.what());
    }
  }
  ForeignKeysOff(const ForeignKeysOff&) = delete;
  ForeignKeysOff& operator=(const ForeignKeysOff&) = delete;

 private:
  Connection& db_;
};

void check_foreign_keys(Connection& db) {
  auto st = db.prepare("PRAGMA foreign_key_check");
  if (st.step()) {
    KA_THROW(DbError, db.path(), ": migration left a row of '", st.column_text(0), "' (rowid ",
             st.column_int64(1), ") referring to a missing row of '", st.column_text(2),
             "'; nothing was changed");
  }
}

}  // namespace

void check_database(Connection& db) {
  check_schema(db);
  check_integrity(db);
}

Connection open_for_reading(const std::string& path) {
  Connection db(path, Connection::Mode::kReadOnly);
  check_database(db);
  return db;
}

void migrate(Connection& db) {
  detail::migrate_to(db, kSchemaVersion);
  mark_abandoned_runs(db);
}

namespace {

// Switching to WAL needs an exclusive lock for a moment, and SQLite answers SQLITE_BUSY to
// it without calling the busy handler when another connection is in the middle of the same
// switch (24 processes creating one database at once failed 1 in about 20 starts). So it is
// retried here, with the busy handler's bound and a growing sleep; a file already in WAL
// mode is left alone (the mode is stored in the file).
void switch_to_wal(Connection& db) {
  const auto start = std::chrono::steady_clock::now();
  auto sleep = std::chrono::milliseconds(1);
  for (;;) {
    {
      auto mode = db.prepare("PRAGMA journal_mode");
      if (mode.step() && mode.column_text(0) == "wal") return;
    }
    try {
      db.exec("PRAGMA journal_mode = WAL");
      return;
    } catch (const DbError&) {
      const int code = sqlite3_errcode(db.handle()) & 0xff;  // exec's own failure
      const auto waited = std::chrono::steady_clock::now() - start;
      if ((code != SQLITE_BUSY && code != SQLITE_LOCKED) ||
          waited > std::chrono::milliseconds(busy_timeout_ms())) {
        throw;
      }
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::milliseconds(250));
  }
}

}  // namespace

namespace detail {

// Note [Race-free migration]
// Two processes creating one new database at once both read user_version 0 before either
// wrote, and the second failed with "table runs already exists". The version is read again
// inside BEGIN IMMEDIATE (the write lock, waited for by the busy handler), so the second sees
// the first's schema and has nothing to do. All steps run in that one transaction: a reader
// never sees a half-migrated file. The checks before the transaction (quick_check included)
// only read; the cheap schema checks run again under the lock, where the version is final.
// A file already at the target version takes no lock at all.
void migrate_to(Connection& db, int target) {
  KA_ASSERT(target >= 0 && target <= kSchemaVersion, "bad target schema version ", target);
  const bool fresh = db.user_version() == 0 && has_no_tables(db);
  if (!fresh) check_database(db);
  switch_to_wal(db);
  // Versions only grow, so a checked file already at `target` needs no write lock: opening
  // never waits behind another process's long transaction unless it has to migrate.
  if (!fresh && db.user_version() >= target) return;
  ForeignKeysOff fk(db);
  Transaction tx(db);
  const int version = db.user_version() == 0 && has_no_tables(db) ? 0 : check_schema(db);
  if (version >= target) return;  // the destructor rolls back the (empty) transaction
  for (int step = version; step < target; ++step) db.exec(kMigrations[step]);
  check_foreign_keys(db);
  db.set_user_version(target);
  tx.commit();
  log().debug("{}: schema migrated from version {} to {}", db.path(), version, target);
}

}  // namespace detail
}  // namespace ka::db
