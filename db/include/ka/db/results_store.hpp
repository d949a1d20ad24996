// ResultsStore: runs and benchmark results in the ka database.
#pragma once

#include <ka/core/fingerprint.hpp>
#include <ka/db/recommendation_table.hpp>
#include <ka/db/sqlite.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ka::db {

/// What became of one measurement (DESIGN.md §7). kCrashed: the process running it died (a
/// signal, an abort, a CUDA sticky error); kTimeout: it overran its deadline and was stopped.
enum class Disposition { kOk, kFailed, kTimeout, kIncorrect, kUnsupported, kCrashed };
/// Every Disposition, in declaration order.
constexpr Disposition kDispositions[] = {Disposition::kOk,        Disposition::kFailed,
                                         Disposition::kTimeout,   Disposition::kIncorrect,
                                         Disposition::kUnsupported, Disposition::kCrashed};
/// "ok", "failed", "timeout", "incorrect", "unsupported", "crashed".
std::string_view to_string(Disposition d);

/// One row of `runs`: where, when and how a benchmark or tuning run was made.
struct RunInfo {
  std::string tool;
  std::string command_line;
  std::string host;
  std::string ka_version;
  std::string git_sha;
  std::string suite;
  std::string device;
  std::string fingerprint;
  std::string fingerprint_json;
  int threads = 1;
  std::optional<double> fma_peak_gflops;
  std::optional<double> fma_peak_1t_gflops;
  std::string libtorch_version;
  std::string openblas_coretype;
  std::string openblas_core;
  std::optional<double> copy_gbps;  ///< STREAM-copy bandwidth probed for the run, GB/s.
  std::optional<double> read_gbps;  ///< Streaming-read bandwidth probed for the run, GB/s.
  std::string strategy;             ///< ka-tune's search strategy; empty: none (stored NULL).
};

/// A RunInfo for `tool` on this machine's CPU: host name, ka's version and git sha, device
/// "cpu", fingerprint key and JSON filled; the caller sets the suite, threads and what else it
/// knows.
RunInfo cpu_run_info(std::string tool, std::string command_line);
/// As cpu_run_info, for the device `fp` describes (a GPU's fingerprint for GPU runs).
RunInfo run_info(const DeviceFingerprint& fp, std::string tool, std::string command_line);

/// One row of `results`: one implementation of one case.
struct ResultRow {
  std::string suite;
  std::string case_name;
  std::string impl;
  std::string benchmark_name;
  std::string op;
  std::string shape_key;
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
  std::string dtype;
  std::string kernel;
  int kernel_version = 0;
  std::string config;
  Disposition disposition = Disposition::kOk;
  std::string error;
  std::optional<double> max_abs_error;
  std::string cache_state = "hot";
  std::int64_t repetitions = 0;
  std::int64_t iterations = 0;
  std::optional<double> median_ns;
  std::optional<double> mean_ns;
  std::optional<double> min_ns;
  std::optional<double> max_ns;
  std::optional<double> stddev_ns;
  std::optional<double> gflops;
  std::optional<double> pct_peak;
  std::optional<double> flop;       ///< Floating-point operations of one call.
  std::optional<double> min_bytes;  ///< Bytes one call must read and write at least.
};

/// One row of `trials`: one configuration of one kernel measured on one shape in a sweep.
struct TrialRow {
  std::string op;  ///< Operator overload or fusion pattern.
  std::string shape_key;
  std::string kernel;
  int kernel_version = 0;
  std::string config;  ///< LaunchConfig canonical form.
  Disposition disposition = Disposition::kOk;
  std::string error;
  std::optional<double> median_ns;
  std::optional<double> mean_ns;
  std::optional<double> min_ns;
  std::optional<double> max_ns;
  std::optional<double> stddev_ns;
  std::optional<double> ci95_ns;  ///< Half-width of the 95% confidence interval.
  std::int64_t repetitions = 0;
  std::string cache_state = "hot";  ///< hot or cold.
};

/// The ka database opened for writing, migrated to the current schema.
///
///   ResultsStore store("ka.db");
///   auto run = store.begin_run(info);
///   store.add_results(run, rows);   // one transaction per call
///   store.finish_run(run, true);
class ResultsStore {
 public:
  /// Opens or creates the database and migrates it. Throws ka::DbError naming the path.
  explicit ResultsStore(const std::string& path);

  /// Inserts a `runs` row with status 'running'; returns its id.
  std::int64_t begin_run(const RunInfo& info);
  /// Makes this process the writer of `run_id` again and marks it 'running': a process that
  /// continues a run its predecessor left (ka-bench --isolate after a lost case), which the
  /// predecessor's death may have had marked 'abandoned'. Throws ka::DbError when there is
  /// no such run.
  void continue_run(std::int64_t run_id);
  /// Inserts `rows` for `run_id` in one transaction: all or nothing.
  void add_results(std::int64_t run_id, const std::vector<ResultRow>& rows);
  /// Marks the run complete (or failed), stamps its end time and drops its trial claims.
  void finish_run(std::int64_t run_id, bool ok);

  /// Records `rows` for `run_id` in one transaction. A trial already stored for the run (same
  /// shape key, kernel and config, as when a sweep resumes) is updated in place, never
  /// duplicated. Returns how many rows were new.
  std::size_t add_trials(std::int64_t run_id, const std::vector<TrialRow>& rows);
  /// Adds or refreshes the `devices` row of `fingerprint`.
  void record_device(const DeviceFingerprint& fingerprint);
  /// Inserts or replaces recommendations (see ka::db::put_recommendations), in one transaction.
  void put_recommendations(const std::vector<Recommendation>& rows);

  [[nodiscard]] Connection& connection() noexcept { return db_; }

 private:
  Connection db_;
};

}  // namespace ka::db
