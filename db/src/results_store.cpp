#include <ka/core/error.hpp>
#include <ka/db/recommendation_io.hpp>
#include <ka/db/results_store.hpp>
#include <ka/db/run_liveness.hpp>

#include <sqlite3.h>
#include <ka/db/schema.hpp>

#include <unistd.h>

#include <string>
#include <string_view>

namespace ka::db {
namespace {

// `what` without the stack frames c10::Error::what() appends ("\nException raised from ...
// (most recent call first):\nframe #0: ...", about 3 KB) and without trailing whitespace: the
// message a person reads. Done here, where error texts are stored, it covers every producer
// whatever exception type carried the text.
std::string without_stack_frames(std::string_view what) {
  for (const std::string_view marker : {"\nException raised from ", "\nframe #0: "}) {
    what = what.substr(0, what.find(marker));
  }
  while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.remove_suffix(1);
  return std::string(what);
}

}  // namespace

RunInfo cpu_run_info(std::string tool, std::string command_line) {
  return run_info(cpu_fingerprint(), std::move(tool), std::move(command_line));
}

RunInfo run_info(const DeviceFingerprint& fp, std::string tool, std::string command_line) {
  RunInfo info;
  info.tool = std::move(tool);
  info.command_line = std::move(command_line);
  char host[256] = {};
  info.host = ::gethostname(host, sizeof(host) - 1) == 0 ? host : "unknown";
  info.ka_version = KA_VERSION;
  info.git_sha = KA_GIT_SHA;
  info.device = fp.device.str();
  info.fingerprint = fp.key();
  info.fingerprint_json = fields_json(fp);
  return info;
}

std::string_view to_string(Disposition d) {
  switch (d) {
    case Disposition::kOk:
      return "ok";
    case Disposition::kFailed:
      return "failed";
    case Disposition::kTimeout:
      return "timeout";
    case Disposition::kIncorrect:
      return "incorrect";
    case Disposition::kUnsupported:
      return "unsupported";
    case Disposition::kCrashed:
      return "crashed";
  }
  return "failed";
}

ResultsStore::ResultsStore(const std::string& path) : db_(path) { migrate(db_); }

void ResultsStore::continue_run(std::int64_t run_id) {
  Transaction tx(db_);
  const ProcessIdentity me = this_process();
  auto st = db_.prepare(
      "UPDATE runs SET status = 'running', finished_at = NULL, pid = ?1, pid_start = ?2, "
      "host_boot = ?3 WHERE id = ?4");
  st.bind(1, me.pid).bind(2, me.start_ticks).bind(3, me.host_boot).bind(4, run_id).run();
  KA_CHECK_TYPE(DbError, sqlite3_changes(db_.handle()) == 1, db_.path(), ": no run ", run_id,
                " to continue");
  tx.commit();
}

std::int64_t ResultsStore::begin_run(const RunInfo& info) {
  Transaction tx(db_);
  auto st = db_.prepare(
      "INSERT INTO runs (started_at, status, tool, command_line, host, ka_version, git_sha, "
      "suite, device, fingerprint, fingerprint_json, threads, fma_peak_gflops, "
      "fma_peak_1t_gflops, libtorch_version, openblas_coretype, openblas_core, pid, pid_start, "
      "host_boot, copy_gbps, read_gbps, strategy) VALUES (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), "
      "'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  // The writer, so a later tool can tell a run whose process was killed (Note [Abandoned
  // runs] in run_liveness.cpp).
  const ProcessIdentity me = this_process();
  st.bind(1, info.tool)
      .bind(2, info.command_line)
      .bind(3, info.host)
      .bind(4, info.ka_version)
      .bind(5, info.git_sha)
      .bind(6, info.suite)
      .bind(7, info.device)
      .bind(8, info.fingerprint)
      .bind(9, info.fingerprint_json)
      .bind(10, info.threads)
      .bind(11, info.fma_peak_gflops)
      .bind(12, info.fma_peak_1t_gflops)
      .bind(13, info.libtorch_version)
      .bind(14, info.openblas_coretype)
      .bind(15, info.openblas_core)
      .bind(16, me.pid)
      .bind(17, me.start_ticks)
      .bind(18, me.host_boot)
      .bind(19, info.copy_gbps)
      .bind(20, info.read_gbps);
  if (info.strategy.empty()) {
    st.bind_null(21);
  } else {
    st.bind(21, info.strategy);
  }
  st.run();
  const std::int64_t id = db_.last_insert_rowid();
  tx.commit();
  return id;
}

void ResultsStore::add_results(std::int64_t run_id, const std::vector<ResultRow>& rows) {
  Transaction tx(db_);
  auto st = db_.prepare(
      "INSERT INTO results (run_id, suite, case_name, impl, benchmark_name, op, shape_key, m, n, "
      "k, dtype, kernel, kernel_version, config, disposition, error, max_abs_error, cache_state, "
      "repetitions, iterations, median_ns, mean_ns, min_ns, max_ns, stddev_ns, gflops, pct_peak, "
      "flop, min_bytes) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  for (const ResultRow& r : rows) {
    st.reset();
    st.bind(1, run_id)
        .bind(2, r.suite)
        .bind(3, r.case_name)
        .bind(4, r.impl)
        .bind(5, r.benchmark_name)
        .bind(6, r.op)
        .bind(7, r.shape_key)
        .bind(8, r.m)
        .bind(9, r.n)
        .bind(10, r.k)
        .bind(11, r.dtype)
        .bind(12, r.kernel)
        .bind(13, r.kernel_version)
        .bind(14, r.config)
        .bind(15, to_string(r.disposition))
        .bind(16, without_stack_frames(r.error))
        .bind(17, r.max_abs_error)
        .bind(18, r.cache_state)
        .bind(19, r.repetitions)
        .bind(20, r.iterations)
        .bind(21, r.median_ns)
        .bind(22, r.mean_ns)
        .bind(23, r.min_ns)
        .bind(24, r.max_ns)
        .bind(25, r.stddev_ns)
        .bind(26, r.gflops)
        .bind(27, r.pct_peak)
        .bind(28, r.flop)
        .bind(29, r.min_bytes)
        .run();
  }
  tx.commit();
}

void ResultsStore::finish_run(std::int64_t run_id, bool ok) {
  Transaction tx(db_);
  db_.prepare(
         "UPDATE runs SET status = ?, finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') "
         "WHERE id = ?")
      .bind(1, ok ? "complete" : "failed")
      .bind(2, run_id)
      .run();
  // Its claims on trials end with it (Note [Shared trials] in trial_claims.cpp).
  db_.prepare("DELETE FROM trial_claims WHERE run_id = ?").bind(1, run_id).run();
  tx.commit();
}

std::size_t ResultsStore::add_trials(std::int64_t run_id, const std::vector<TrialRow>& rows) {
  Transaction tx(db_);
  auto exists = db_.prepare(
      "SELECT 1 FROM trials WHERE run_id = ? AND shape_key = ? AND kernel = ? AND config = ?");
  auto st = db_.prepare(
      "INSERT INTO trials (run_id, op, shape_key, kernel, kernel_version, config, disposition, "
      "error, median_ns, mean_ns, min_ns, max_ns, stddev_ns, ci95_ns, repetitions, cache_state, "
      "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
      "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) "
      "ON CONFLICT (run_id, shape_key, kernel, config) DO UPDATE SET op = excluded.op, "
      "kernel_version = excluded.kernel_version, disposition = excluded.disposition, "
      "error = excluded.error, median_ns = excluded.median_ns, mean_ns = excluded.mean_ns, "
      "min_ns = excluded.min_ns, max_ns = excluded.max_ns, stddev_ns = excluded.stddev_ns, "
      "ci95_ns = excluded.ci95_ns, repetitions = excluded.repetitions, "
      "cache_state = excluded.cache_state, created_at = excluded.created_at");
  std::size_t added = 0;
  for (const TrialRow& r : rows) {
    exists.reset();
    exists.bind(1, run_id).bind(2, r.shape_key).bind(3, r.kernel).bind(4, r.config);
    if (!exists.step()) ++added;
    exists.reset();
    st.reset();
    st.bind(1, run_id)
        .bind(2, r.op)
        .bind(3, r.shape_key)
        .bind(4, r.kernel)
        .bind(5, r.kernel_version)
        .bind(6, r.config)
        .bind(7, to_string(r.disposition))
        .bind(8, without_stack_frames(r.error))
        .bind(9, r.median_ns)
        .bind(10, r.mean_ns)
        .bind(11, r.min_ns)
        .bind(12, r.max_ns)
        .bind(13, r.stddev_ns)
        .bind(14, r.ci95_ns)
        .bind(15, r.repetitions)
        .bind(16, r.cache_state)
        .run();
  }
  tx.commit();
  return added;
}

void ResultsStore::record_device(const DeviceFingerprint& fingerprint) {
  Transaction tx(db_);
  ka::db::record_device(db_, fingerprint.key(), fields_json(fingerprint));
  tx.commit();
}

void ResultsStore::put_recommendations(const std::vector<Recommendation>& rows) {
  Transaction tx(db_);
  ka::db::put_recommendations(db_, rows);
  tx.commit();
}

}  // namespace ka::db
