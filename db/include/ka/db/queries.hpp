// Read-only views of a ka database for tools that show what it holds (ka-db show): runs,
// devices, trial counts and trials, each row a struct with named fields. Every function throws
// ka::DbError naming the file when a query fails, as on a database without the tables it reads.
#pragma once

#include <ka/db/results_store.hpp>
#include <ka/db/sqlite.hpp>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ka::db {

/// One `runs` row with how many results and trials it recorded.
struct RunSummary {
  std::int64_t id = 0;
  std::string tool;
  std::string status;                      ///< "running", "complete" or "failed".
  std::string started_at;                  ///< ISO 8601, UTC.
  std::optional<std::string> finished_at;  ///< Unset while the run is running.
  std::string device;                      ///< "cpu", "cuda:0".
  std::string host;
  std::int64_t results = 0;
  std::int64_t trials = 0;  ///< 0 in a schema-1 database, which has no trials.
};

/// Every run of `db` (schema 1 or later), by id.
std::vector<RunSummary> list_runs(Connection& db);

/// One `devices` row with how many recommendations it has.
struct DeviceSummary {
  std::string fingerprint;  ///< DeviceFingerprint::key().
  std::string first_seen;   ///< ISO 8601, UTC.
  std::string last_seen;    ///< ISO 8601, UTC.
  std::int64_t recommendations = 0;
};

/// Every device of `db` (schema 2 or later), in the order they were first recorded.
std::vector<DeviceSummary> list_devices(Connection& db);

/// The trials of one kernel version on one op, over every shape and run.
struct TrialCounts {
  std::string op;  ///< Operator overload or fusion pattern.
  std::string kernel;
  int kernel_version = 0;
  std::int64_t shapes = 0;  ///< Distinct shape keys.
  std::int64_t trials = 0;
  std::int64_t ok = 0;    ///< Trials with disposition ok.
  std::int64_t runs = 0;  ///< Distinct runs that made them.
};

/// Trial counts of `db` (schema 2 or later) per op, kernel and kernel version, sorted by them.
std::vector<TrialCounts> count_trials(Connection& db);

/// Which trials list_trials() returns; an empty field matches every value.
struct TrialFilter {
  std::string op;
  std::string shape_key;
};

/// One stored trial as list_trials() returns it.
struct StoredTrial {
  std::int64_t run_id = 0;
  std::string shape_key;
  std::string kernel;
  int kernel_version = 0;
  std::string config;  ///< LaunchConfig canonical form.
  Disposition disposition = Disposition::kOk;
  std::optional<std::string> error;  ///< Unset when the row stores none (NULL).
  std::optional<double> median_ns;
  std::optional<double> ci95_ns;  ///< Half-width of the 95% confidence interval.
  std::optional<std::int64_t> repetitions;
};

/// The trials of `db` (schema 2 or later) that `filter` selects, by shape key and kernel,
/// fastest first, trials without a median last.
std::vector<StoredTrial> list_trials(Connection& db, const TrialFilter& filter);

/// The names of the columns `table` has in `db` (none when there is no such table): lets a
/// reader of older schemas read a column a later migration added as NULL.
std::set<std::string> column_names(Connection& db, const std::string& table);

}  // namespace ka::db
