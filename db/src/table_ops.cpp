#include <ka/core/error.hpp>
#include <ka/db/queries.hpp>
#include <ka/db/recommendation_io.hpp>
#include <ka/db/schema.hpp>
#include <ka/db/table_ops.hpp>

#include "recommendation_rows.hpp"

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

// Note [Merge rules]
// `ka-db merge` combines databases tuned on several machines. Recommendations collide on
// UNIQUE (fingerprint, op, shape_key, kernel); of two colliding rows:
//  - a newer kernel version wins whatever the medians: the older row measured code this build
//    no longer has (RecommendationTable would skip it anyway);
//  - at equal versions the lower median wins: both rows were measured on devices with the
//    same fingerprint, so the faster configuration is the better recommendation;
//  - a known median beats an unknown (NULL) one; a tie keeps the target's row, so merging a
//    database twice changes nothing.
// Runs are copied under fresh ids (ids are per file and would clash); a run the target already
// holds (same started_at, host, tool, command_line, fingerprint: the same run merged before)
// is matched instead of copied, and its trials and results are added only where missing, so a
// merge is idempotent. A copied recommendation's source_run is remapped to the copied run;
// when the source file does not contain that run (a table export) it becomes NULL, since the
// old id would name an unrelated run of the target.

// Note [Significant change]
// A tuned median moves between two tables for two reasons: the configuration or code really
// got slower or faster, or measurement noise. `ka-db diff` calls a change a regression (or an
// improvement) only when |B - A| exceeds both `threshold` × A (a change too small to matter)
// and, when both trials stored a CI95 half-width, sqrt(ci_a² + ci_b²), the half-width of the
// difference of two independent estimates. Without both CIs only the threshold applies, and
// the report says so.

namespace ka::db {
namespace {

namespace fs = std::filesystem;

enum class Kind { kInt, kReal, kText };
struct Column {
  const char* name;
  Kind kind;
};

// Every column but `id` (and `run_id`, which is remapped).
const std::vector<Column> kRunColumns = {
    {"started_at", Kind::kText},
    {"finished_at", Kind::kText},
    {"status", Kind::kText},
    {"tool", Kind::kText},
    {"command_line", Kind::kText},
    {"host", Kind::kText},
    {"ka_version", Kind::kText},
    {"git_sha", Kind::kText},
    {"suite", Kind::kText},
    {"device", Kind::kText},
    {"fingerprint", Kind::kText},
    {"fingerprint_json", Kind::kText},
    {"threads", Kind::kInt},
    {"fma_peak_gflops", Kind::kReal},
    {"fma_peak_1t_gflops", Kind::kReal},
    {"libtorch_version", Kind::kText},
    {"openblas_coretype", Kind::kText},
    {"openblas_core", Kind::kText},
    {"copy_gbps", Kind::kReal},
    {"read_gbps", Kind::kReal},
    {"strategy", Kind::kText},
};
const std::vector<Column> kTrialColumns = {
    {"op", Kind::kText},          {"shape_key", Kind::kText},
    {"kernel", Kind::kText},      {"kernel_version", Kind::kInt},
    {"config", Kind::kText},      {"disposition", Kind::kText},
    {"error", Kind::kText},       {"median_ns", Kind::kReal},
    {"mean_ns", Kind::kReal},     {"min_ns", Kind::kReal},
    {"max_ns", Kind::kReal},      {"stddev_ns", Kind::kReal},
    {"ci95_ns", Kind::kReal},     {"repetitions", Kind::kInt},
    {"cache_state", Kind::kText}, {"created_at", Kind::kText},
};
const std::vector<Column> kResultColumns = {
    {"suite", Kind::kText},
    {"case_name", Kind::kText},
    {"impl", Kind::kText},
    {"benchmark_name", Kind::kText},
    {"op", Kind::kText},
    {"shape_key", Kind::kText},
    {"m", Kind::kInt},
    {"n", Kind::kInt},
    {"k", Kind::kInt},
    {"dtype", Kind::kText},
    {"kernel", Kind::kText},
    {"kernel_version", Kind::kInt},
    {"config", Kind::kText},
    {"disposition", Kind::kText},
    {"error", Kind::kText},
    {"max_abs_error", Kind::kReal},
    {"cache_state", Kind::kText},
    {"repetitions", Kind::kInt},
    {"iterations", Kind::kInt},
    {"median_ns", Kind::kReal},
    {"mean_ns", Kind::kReal},
    {"min_ns", Kind::kReal},
    {"max_ns", Kind::kReal},
    {"stddev_ns", Kind::kReal},
    {"gflops", Kind::kReal},
    {"pct_peak", Kind::kReal},
    {"flop", Kind::kReal},
    {"min_bytes", Kind::kReal},
};

std::string column_list(const std::vector<Column>& columns) {
  std::string out;
  for (const Column& c : columns) out += (out.empty() ? "" : ", ") + std::string(c.name);
  return out;
}

// `columns` as a SELECT list over `table` of `source`: a column the source's (older) schema
// lacks reads as NULL, as the migration that added it leaves older rows.
std::string select_list(Connection& source, const std::string& table,
                        const std::vector<Column>& columns) {
  const std::set<std::string> present = column_names(source, table);
  std::string out;
  for (const Column& c : columns) {
    out += out.empty() ? "" : ", ";
    out += present.count(c.name) != 0 ? std::string(c.name) : "NULL";
  }
  return out;
}

std::string placeholders(std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) out += i ? ", ?" : "?";
  return out;
}

void copy_value(const Statement& from, int from_index, Statement& to, int to_index, Kind kind) {
  if (from.column_is_null(from_index)) {
    to.bind_null(to_index);
    return;
  }
  switch (kind) {
    case Kind::kInt:
      to.bind(to_index, from.column_int64(from_index));
      break;
    case Kind::kReal:
      to.bind(to_index, from.column_double(from_index));
      break;
    case Kind::kText:
      to.bind(to_index, from.column_text(from_index));
      break;
  }
}

std::size_t changes(Connection& db) {
  return static_cast<std::size_t>(sqlite3_changes(db.handle()));
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec) && !ec;
}

void merge_devices(Connection& source, Connection& target, MergeCounts& counts) {
  auto read = source.prepare(
      "SELECT fingerprint, fields_json, first_seen, last_seen FROM devices ORDER BY id");
  auto exists = target.prepare("SELECT 1 FROM devices WHERE fingerprint = ?");
  // Fields of the most recently seen device win, but never a blank "{}" over known fields.
  auto upsert = target.prepare(
      "INSERT INTO devices (fingerprint, fields_json, first_seen, last_seen) VALUES (?, ?, ?, ?) "
      "ON CONFLICT (fingerprint) DO UPDATE SET "
      "fields_json = CASE WHEN devices.fields_json = '{}' OR (excluded.fields_json <> '{}' AND "
      "excluded.last_seen > devices.last_seen) THEN excluded.fields_json "
      "ELSE devices.fields_json END, "
      "first_seen = min(devices.first_seen, excluded.first_seen), "
      "last_seen = max(devices.last_seen, excluded.last_seen)");
  while (read.step()) {
    const std::string fingerprint = read.column_text(0);
    exists.reset();
    exists.bind(1, fingerprint);
    if (!exists.step()) ++counts.devices;
    exists.reset();
    upsert.reset();
    upsert.bind(1, fingerprint)
        .bind(2, read.column_text(1))
        .bind(3, read.column_text(2))
        .bind(4, read.column_text(3))
        .run();
  }
}

// Source run id -> target run id, for every run of `source`.
std::map<std::int64_t, std::int64_t> merge_runs(Connection& source, Connection& target,
                                                MergeCounts& counts) {
  std::map<std::int64_t, std::int64_t> ids;
  auto read = source.prepare("SELECT id, " + select_list(source, "runs", kRunColumns) +
                             " FROM runs ORDER BY id");
  auto find = target.prepare(
      "SELECT id FROM runs WHERE started_at = ? AND host = ? AND tool = ? AND command_line = ? "
      "AND fingerprint = ?");
  auto insert = target.prepare("INSERT INTO runs (" + column_list(kRunColumns) + ") VALUES (" +
                               placeholders(kRunColumns.size()) + ")");
  while (read.step()) {
    // Column indices in `read`: id at 0, then kRunColumns from 1.
    find.reset();
    find.bind(1, read.column_text(1))    // started_at
        .bind(2, read.column_text(6))    // host
        .bind(3, read.column_text(4))    // tool
        .bind(4, read.column_text(5))    // command_line
        .bind(5, read.column_text(11));  // fingerprint
    if (find.step()) {
      ids[read.column_int64(0)] = find.column_int64(0);
      ++counts.runs_present;
      find.reset();
      continue;
    }
    find.reset();
    insert.reset();
    for (std::size_t i = 0; i < kRunColumns.size(); ++i) {
      const int index = static_cast<int>(i) + 1;
      copy_value(read, index, insert, index, kRunColumns[i].kind);
    }
    insert.run();
    ids[read.column_int64(0)] = target.last_insert_rowid();
    ++counts.runs;
  }
  return ids;
}

// Copies the rows of `table` (trials or results) with run ids remapped; rows the target
// already has (its UNIQUE constraint) are skipped. Returns the number copied.
std::size_t merge_run_rows(Connection& source, Connection& target, const char* table,
                           const std::vector<Column>& columns,
                           const std::map<std::int64_t, std::int64_t>& run_ids) {
  const std::string list = column_list(columns);
  auto read = source.prepare("SELECT run_id, " + select_list(source, table, columns) + " FROM " +
                             table + " ORDER BY id");
  auto insert =
      target.prepare(std::string("INSERT INTO ") + table + " (run_id, " + list + ") VALUES (" +
                     placeholders(columns.size() + 1) + ") ON CONFLICT DO NOTHING");
  std::size_t copied = 0;
  while (read.step()) {
    const auto it = run_ids.find(read.column_int64(0));
    KA_ASSERT(it != run_ids.end(), table, " row of ", source.path(), " names run ",
              read.column_int64(0), ", which is not in its runs table");
    insert.reset();
    insert.bind(1, it->second);
    for (std::size_t i = 0; i < columns.size(); ++i) {
      const int index = static_cast<int>(i) + 1;
      copy_value(read, index, insert, index + 1, columns[i].kind);
    }
    insert.run();
    copied += changes(target);
  }
  return copied;
}

void merge_recommendations(Connection& source, Connection& target,
                           const std::map<std::int64_t, std::int64_t>& run_ids,
                           MergeCounts& counts) {
  std::vector<Recommendation> winners;
  auto find = target.prepare(
      "SELECT kernel_version, median_ns FROM recommendations WHERE fingerprint = ? AND op = ? "
      "AND shape_key = ? AND kernel = ?");
  for (Recommendation& row : detail::read_recommendations(source)) {
    // See Note [Merge rules] on source_run.
    if (row.source_run.has_value()) {
      const auto it = run_ids.find(*row.source_run);
      row.source_run = it != run_ids.end() ? std::optional<std::int64_t>(it->second) : std::nullopt;
    }
    find.reset();
    find.bind(1, row.fingerprint).bind(2, row.op).bind(3, row.shape_key).bind(4, row.kernel);
    if (!find.step()) {
      ++counts.added;
      winners.push_back(std::move(row));
      continue;
    }
    Recommendation existing;
    existing.kernel_version = static_cast<int>(find.column_int64(0));
    if (!find.column_is_null(1)) existing.median_ns = find.column_double(1);
    find.reset();
    if (merge_prefers(row, existing)) {
      ++counts.replaced;
      winners.push_back(std::move(row));
    } else {
      ++counts.kept;
    }
  }
  put_recommendations(target, winners);
}

}  // namespace

std::vector<Recommendation> read_recommendation_rows(const std::string& path) {
  Connection db = open_for_reading(path);
  detail::check_table_schema(db);
  std::vector<Recommendation> rows = detail::read_recommendations(db);
  std::sort(rows.begin(), rows.end(), [](const Recommendation& x, const Recommendation& y) {
    return std::tie(x.fingerprint, x.op, x.shape_key, x.kernel) <
           std::tie(y.fingerprint, y.op, y.shape_key, y.kernel);
  });
  return rows;
}

bool merge_prefers(const Recommendation& incoming, const Recommendation& existing) {
  // See Note [Merge rules].
  if (incoming.kernel_version != existing.kernel_version) {
    return incoming.kernel_version > existing.kernel_version;
  }
  if (std::isnan(incoming.median_ns)) return false;
  if (std::isnan(existing.median_ns)) return true;
  return incoming.median_ns < existing.median_ns;
}

MergeCounts merge_databases(Connection& target, const std::vector<std::string>& sources) {
  for (const std::string& path : sources) {
    KA_CHECK(!same_file(path, target.path()), "cannot merge '", path,
             "' into itself; give another --into");
  }
  migrate(target);
  // Every source row is checked as an import checks it (Note [Validated rows]) before the
  // target's transaction begins, so a refused merge writes no row.
  std::vector<Connection> opened;
  for (const std::string& path : sources) {
    Connection source = open_for_reading(path);
    detail::check_table_schema(source);
    (void)detail::read_recommendations(source);
    opened.push_back(std::move(source));
  }
  MergeCounts counts;
  Transaction tx(target);
  for (Connection& source : opened) {
    merge_devices(source, target, counts);
    const auto run_ids = merge_runs(source, target, counts);
    counts.trials += merge_run_rows(source, target, "trials", kTrialColumns, run_ids);
    counts.results += merge_run_rows(source, target, "results", kResultColumns, run_ids);
    merge_recommendations(source, target, run_ids, counts);
  }
  tx.commit();
  return counts;
}

std::string_view to_string(DiffStatus s) {
  switch (s) {
    case DiffStatus::kSame:
      return "same";
    case DiffStatus::kWithinNoise:
      return "within noise";
    case DiffStatus::kRegression:
      return "REGRESSION";
    case DiffStatus::kImprovement:
      return "improved";
    case DiffStatus::kUnknown:
      return "unknown";
    case DiffStatus::kOnlyA:
      return "only in A";
    case DiffStatus::kOnlyB:
      return "only in B";
  }
  return "?";
}

DiffStatus classify_change(double median_a_ns, double median_b_ns, std::optional<double> ci95_a_ns,
                           std::optional<double> ci95_b_ns, double threshold) {
  // See Note [Significant change].
  if (!std::isfinite(median_a_ns) || !std::isfinite(median_b_ns) || median_a_ns <= 0) {
    return DiffStatus::kUnknown;
  }
  const double delta = median_b_ns - median_a_ns;
  if (std::fabs(delta) <= threshold * median_a_ns) return DiffStatus::kSame;
  if (ci95_a_ns.has_value() && ci95_b_ns.has_value() &&
      std::fabs(delta) <= std::hypot(*ci95_a_ns, *ci95_b_ns)) {
    return DiffStatus::kWithinNoise;
  }
  return delta > 0 ? DiffStatus::kRegression : DiffStatus::kImprovement;
}

std::vector<DiffRow> diff_tables(const std::vector<Recommendation>& a,
                                 const std::vector<Recommendation>& b, double threshold,
                                 const CiLookup& ci95_a, const CiLookup& ci95_b) {
  KA_CHECK(std::isfinite(threshold) && threshold >= 0, "bad diff threshold ", threshold,
           ": expected a fraction >= 0 (0.03 = 3%)");
  using Key = std::pair<std::string, std::string>;
  // The best row of each (op, shape_key): several kernels may serve one shape.
  auto best = [](const std::vector<Recommendation>& rows) {
    std::map<Key, const Recommendation*> out;
    for (const Recommendation& r : rows) {
      const Recommendation*& slot = out[{r.op, r.shape_key}];
      if (slot == nullptr || (!std::isnan(r.median_ns) &&
                              (std::isnan(slot->median_ns) || r.median_ns < slot->median_ns))) {
        slot = &r;
      }
    }
    return out;
  };
  const auto best_a = best(a);
  const auto best_b = best(b);
  std::map<Key, DiffRow> rows;
  for (const auto& [key, r] : best_a) {
    DiffRow& d = rows[key];
    d.a = *r;
    if (ci95_a) d.ci95_a_ns = ci95_a(*r);
  }
  for (const auto& [key, r] : best_b) {
    DiffRow& d = rows[key];
    d.b = *r;
    if (ci95_b) d.ci95_b_ns = ci95_b(*r);
  }
  std::vector<DiffRow> out;
  out.reserve(rows.size());
  for (auto& [key, d] : rows) {
    d.op = key.first;
    d.shape_key = key.second;
    d.ratio = std::numeric_limits<double>::quiet_NaN();
    if (!d.b.has_value()) {
      d.status = DiffStatus::kOnlyA;
    } else if (!d.a.has_value()) {
      d.status = DiffStatus::kOnlyB;
    } else {
      d.used_ci = d.ci95_a_ns.has_value() && d.ci95_b_ns.has_value();
      if (d.a->median_ns > 0) d.ratio = d.b->median_ns / d.a->median_ns;
      d.status =
          classify_change(d.a->median_ns, d.b->median_ns, d.ci95_a_ns, d.ci95_b_ns, threshold);
    }
    out.push_back(std::move(d));
  }
  return out;
}

std::optional<double> trial_ci95_ns(Connection& db, const Recommendation& row) {
  auto st = db.prepare(
      "SELECT ci95_ns FROM trials WHERE op = ? AND shape_key = ? AND kernel = ? AND "
      "kernel_version = ? AND config = ? AND disposition = 'ok' AND ci95_ns IS NOT NULL "
      "ORDER BY (run_id = ?) DESC, id DESC LIMIT 1");
  st.bind(1, row.op)
      .bind(2, row.shape_key)
      .bind(3, row.kernel)
      .bind(4, row.kernel_version)
      .bind(5, row.config.str())
      .bind(6, row.source_run.value_or(-1));
  if (!st.step()) return std::nullopt;
  return st.column_double(0);
}

std::vector<DiffRow> diff_databases(const std::string& path_a, const std::string& path_b,
                                    std::string_view fingerprint, double threshold) {
  auto rows_of = [fingerprint](const std::string& path) {
    std::vector<Recommendation> rows = read_recommendation_rows(path);
    rows.erase(std::remove_if(
                   rows.begin(), rows.end(),
                   [fingerprint](const Recommendation& r) { return r.fingerprint != fingerprint; }),
               rows.end());
    return rows;
  };
  const std::vector<Recommendation> a = rows_of(path_a);
  const std::vector<Recommendation> b = rows_of(path_b);
  Connection db_a = open_for_reading(path_a);
  Connection db_b = open_for_reading(path_b);
  return diff_tables(
      a, b, threshold, [&db_a](const Recommendation& r) { return trial_ci95_ns(db_a, r); },
      [&db_b](const Recommendation& r) { return trial_ci95_ns(db_b, r); });
}

}  // namespace ka::db
