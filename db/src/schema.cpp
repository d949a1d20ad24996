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
};

constexpr int kSteps = static_cast<int>(sizeof(kMigrations) / sizeof(kMigrations[0]));
static_assert(kSteps == kSchemaVersion, "one migration step per schema version");

}  // namespace

void migrate(Connection& db) {
  const int version = db.user_version();
  KA_CHECK_TYPE(DbError, version <= kSchemaVersion, db.path(), ": database schema version ",
                version, " is newer than this ka supports (", kSchemaVersion,
                "); use a newer ka or another --db");
  KA_CHECK_TYPE(DbError, version >= 0, db.path(), ": bad schema version ", version);
  for (int step = version; step < kSchemaVersion; ++step) {
    Transaction tx(db);
    db.exec(kMigrations[step]);
    db.set_user_version(step + 1);
    tx.commit();
  }
}

}  // namespace ka::db
