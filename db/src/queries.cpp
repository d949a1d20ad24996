#include <ka/core/error.hpp>
#include <ka/db/queries.hpp>

namespace ka::db {
namespace {

// Steps `st` to its end, reading each row with `read`.
template <class Row>
std::vector<Row> read_rows(Statement& st, Row (*read)(const Statement&)) {
  std::vector<Row> rows;
  while (st.step()) rows.push_back(read(st));
  return rows;
}

RunSummary run_summary(const Statement& st) {
  RunSummary r;
  r.id = st.column_int64(0);
  r.tool = st.column_text(1);
  r.status = st.column_text(2);
  r.started_at = st.column_text(3);
  if (!st.column_is_null(4)) r.finished_at = st.column_text(4);
  r.device = st.column_text(5);
  r.host = st.column_text(6);
  r.results = st.column_int64(7);
  r.trials = st.column_int64(8);
  return r;
}

DeviceSummary device_summary(const Statement& st) {
  DeviceSummary d;
  d.fingerprint = st.column_text(0);
  d.first_seen = st.column_text(1);
  d.last_seen = st.column_text(2);
  d.recommendations = st.column_int64(3);
  return d;
}

TrialCounts trial_counts(const Statement& st) {
  TrialCounts c;
  c.op = st.column_text(0);
  c.kernel = st.column_text(1);
  c.kernel_version = static_cast<int>(st.column_int64(2));
  c.shapes = st.column_int64(3);
  c.trials = st.column_int64(4);
  c.ok = st.column_int64(5);
  c.runs = st.column_int64(6);
  return c;
}

Disposition parse_disposition(const std::string& text) {
  for (const Disposition d : kDispositions) {
    if (to_string(d) == text) return d;
  }
  // The schema's CHECK constraint admits no other value.
  KA_ASSERT(false, "trial with the unknown disposition '", text, "'");
  return Disposition::kFailed;
}

StoredTrial stored_trial(const Statement& st) {
  StoredTrial t;
  t.run_id = st.column_int64(0);
  t.shape_key = st.column_text(1);
  t.kernel = st.column_text(2);
  t.kernel_version = static_cast<int>(st.column_int64(3));
  t.config = st.column_text(4);
  t.disposition = parse_disposition(st.column_text(5));
  if (!st.column_is_null(6)) t.error = st.column_text(6);
  if (!st.column_is_null(7)) t.median_ns = st.column_double(7);
  if (!st.column_is_null(8)) t.ci95_ns = st.column_double(8);
  if (!st.column_is_null(9)) t.repetitions = st.column_int64(9);
  return t;
}

}  // namespace

std::vector<RunSummary> list_runs(Connection& db) {
  // Schema 1 has no trials table: its runs have none.
  const std::string trials =
      db.user_version() >= 2 ? "(SELECT count(*) FROM trials t WHERE t.run_id = r.id)" : "0";
  auto st = db.prepare(
      "SELECT id, tool, status, started_at, finished_at, device, host, "
      "(SELECT count(*) FROM results x WHERE x.run_id = r.id), " +
      trials + " FROM runs r ORDER BY id");
  return read_rows(st, &run_summary);
}

std::vector<DeviceSummary> list_devices(Connection& db) {
  auto st = db.prepare(
      "SELECT fingerprint, first_seen, last_seen, (SELECT count(*) FROM recommendations r WHERE "
      "r.fingerprint = d.fingerprint) FROM devices d ORDER BY id");
  return read_rows(st, &device_summary);
}

std::vector<TrialCounts> count_trials(Connection& db) {
  auto st = db.prepare(
      "SELECT op, kernel, kernel_version, count(DISTINCT shape_key), count(*), "
      "sum(disposition = 'ok'), count(DISTINCT run_id) FROM trials "
      "GROUP BY op, kernel, kernel_version ORDER BY op, kernel, kernel_version");
  return read_rows(st, &trial_counts);
}

std::vector<StoredTrial> list_trials(Connection& db, const TrialFilter& filter) {
  std::string sql =
      "SELECT run_id, shape_key, kernel, kernel_version, config, disposition, error, median_ns, "
      "ci95_ns, repetitions FROM trials WHERE 1";
  if (!filter.op.empty()) sql += " AND op = ?1";
  if (!filter.shape_key.empty()) sql += " AND shape_key = ?2";
  sql += " ORDER BY shape_key, kernel, median_ns IS NULL, median_ns";
  auto st = db.prepare(sql);
  if (!filter.op.empty()) st.bind(1, filter.op);
  if (!filter.shape_key.empty()) st.bind(2, filter.shape_key);
  return read_rows(st, &stored_trial);
}

std::set<std::string> column_names(Connection& db, const std::string& table) {
  std::set<std::string> names;
  auto st = db.prepare("SELECT name FROM pragma_table_info(?)");
  st.bind(1, table);
  while (st.step()) names.insert(st.column_text(0));
  return names;
}

}  // namespace ka::db
