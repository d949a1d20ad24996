#include <ka/core/error.hpp>
#include <ka/db/schema.hpp>

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
    // 2 -> 3: the disposition 'crashed' (a trial or case whose worker process died). SQLite
    // cannot alter a CHECK constraint, so both tables are rebuilt; nothing references them.
    R"sql(
CREATE TABLE results_v3 (
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
INSERT INTO results_v3 SELECT * FROM results;
DROP TABLE results;
ALTER TABLE results_v3 RENAME TO results;
CREATE INDEX results_by_shape ON results (shape_key, impl);
CREATE TABLE trials_v3 (
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
INSERT INTO trials_v3 SELECT * FROM trials;
DROP TABLE trials;
ALTER TABLE trials_v3 RENAME TO trials;
CREATE INDEX trials_by_shape ON trials (op, shape_key, kernel, kernel_version);
)sql",
};

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

void migrate(Connection& db) { detail::migrate_to(db, kSchemaVersion); }

namespace detail {

void migrate_to(Connection& db, int target) {
  KA_ASSERT(target >= 0 && target <= kSchemaVersion, "bad target schema version ", target);
  const int version = db.user_version();
  KA_CHECK_TYPE(DbError, version <= kSchemaVersion, db.path(), ": database schema version ",
                version, " is newer than this ka supports (", kSchemaVersion,
                "); use a newer ka or another --db");
  KA_CHECK_TYPE(DbError, version >= 0, db.path(), ": bad schema version ", version);
  for (int step = version; step < target; ++step) {
    Transaction tx(db);
    db.exec(kMigrations[step]);
    db.set_user_version(step + 1);
    tx.commit();
  }
}

}  // namespace detail
}  // namespace ka::db
