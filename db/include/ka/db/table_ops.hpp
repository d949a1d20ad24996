// Operations across ka databases: merging several machines' databases into one, and comparing
// two recommendation tables case by case (ka-db merge, ka-db diff).
#pragma once

#include <ka/db/recommendation_table.hpp>
#include <ka/db/sqlite.hpp>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ka::db {

/// Every `recommendations` row of the ka database or table export at `path`, of every device
/// and kernel version, sorted by (fingerprint, op, shape_key, kernel). Opens read-only. Throws
/// ka::DbError naming the file when it cannot be read or has no recommendation table.
std::vector<Recommendation> read_recommendation_rows(const std::string& path);

/// True when a merge should replace `existing` by `incoming`, two rows for the same
/// (fingerprint, op, shape_key, kernel): the newer kernel version wins; at equal versions the
/// lower median wins (a known median beats an unknown one); a tie keeps `existing`.
/// See Note [Merge rules] in table_ops.cpp.
[[nodiscard]] bool merge_prefers(const Recommendation& incoming, const Recommendation& existing);

/// What merge_databases() did.
struct MergeCounts {
  std::size_t added = 0;         ///< Recommendations new to the target.
  std::size_t replaced = 0;      ///< Target recommendations replaced by a better source row.
  std::size_t kept = 0;          ///< Source recommendations dropped: the target's row was better.
  std::size_t devices = 0;       ///< `devices` rows added to the target.
  std::size_t runs = 0;          ///< `runs` rows copied (with new ids).
  std::size_t runs_present = 0;  ///< Source runs the target already had (same run), not copied.
  std::size_t trials = 0;        ///< `trials` rows copied.
  std::size_t results = 0;       ///< `results` rows copied.
};

/// Merges the ka databases at `sources`, in order, into `target` (migrated first) in one
/// transaction: all or nothing. Devices are united; runs are copied under new ids with their
/// trials and results (a run the target already has, same start time, host, tool, command
/// line and fingerprint, is not copied twice); recommendations follow merge_prefers(). Throws
/// ka::DbError naming the file that cannot be read or the row that is not valid (checked as
/// import_sqlite() checks it: see Note [Validated rows]); then the target is unchanged.
MergeCounts merge_databases(Connection& target, const std::vector<std::string>& sources);

/// How one (op, shape_key) compares between table A and table B.
enum class DiffStatus {
  kSame,         ///< |B - A| within the threshold.
  kWithinNoise,  ///< Beyond the threshold, but within the combined CI95 of the two medians.
  kRegression,   ///< B slower than A beyond the threshold (and the combined CI95 when known).
  kImprovement,  ///< B faster than A beyond the threshold (and the combined CI95 when known).
  kUnknown,      ///< A median is missing: cannot compare.
  kOnlyA,
  kOnlyB,
};
/// "same", "within noise", "REGRESSION", "improved", "unknown", "only in A", "only in B".
std::string_view to_string(DiffStatus s);

/// One case of a diff. For each side, the best row (lowest median) of that (op, shape_key).
struct DiffRow {
  std::string op;
  std::string shape_key;
  std::optional<Recommendation> a;
  std::optional<Recommendation> b;
  std::optional<double> ci95_a_ns;  ///< Half-width of A's median's CI95 (from its trial).
  std::optional<double> ci95_b_ns;
  double ratio = 0.0;    ///< b.median_ns / a.median_ns; NaN when not comparable.
  bool used_ci = false;  ///< Both CI95s known: significance used them, not only the threshold.
  DiffStatus status = DiffStatus::kUnknown;
};

/// Classifies B against A: a change counts only when |B - A| exceeds `threshold` × A and,
/// when both CI95 half-widths are known, sqrt(ci_a² + ci_b²). See Note [Significant change].
[[nodiscard]] DiffStatus classify_change(double median_a_ns, double median_b_ns,
                                         std::optional<double> ci95_a_ns,
                                         std::optional<double> ci95_b_ns, double threshold);

/// The CI95 half-width of a row's median, or nullopt when unknown.
using CiLookup = std::function<std::optional<double>(const Recommendation&)>;

/// Rows of `a` and `b` (both for one device) compared per (op, shape_key), sorted by op and
/// shape key; cases in only one table are listed as kOnlyA / kOnlyB. `ci95_a` and `ci95_b`
/// give each side's CI95 (empty: none known, threshold only). Throws ka::ValueError when
/// `threshold` is negative or not finite.
std::vector<DiffRow> diff_tables(const std::vector<Recommendation>& a,
                                 const std::vector<Recommendation>& b, double threshold,
                                 const CiLookup& ci95_a = {}, const CiLookup& ci95_b = {});

/// The CI95 half-width stored with the trial that produced `row` in the database `db` (same
/// op, shape key, kernel, version and config, disposition ok; the trial of row.source_run
/// first, else the latest), or nullopt when the database has no such trial with a CI.
std::optional<double> trial_ci95_ns(Connection& db, const Recommendation& row);

/// diff_tables() of the rows of `fingerprint` in the databases at `path_a` and `path_b`, with
/// each side's CI95 from its own trials (trial_ci95_ns()). Throws ka::DbError naming a file
/// that cannot be read.
std::vector<DiffRow> diff_databases(const std::string& path_a, const std::string& path_b,
                                    std::string_view fingerprint, double threshold);

}  // namespace ka::db
