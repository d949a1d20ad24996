// RecommendationTable: tuned launch configurations per device and operator shape, with the
// fallbacks exact shape → nearest tuned shape → the op's architecture default → heuristic.
#pragma once

#include <ka/core/fingerprint.hpp>
#include <ka/core/launch_config.hpp>
#include <ka/core/shape_key.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ka::db {

/// Where a recommended configuration came from; kFallback: nowhere, libtorch's own kernel
/// ran the op (a graph node ka does not serve).
enum class Provenance { kExact, kNearestShape, kArchDefault, kHeuristic, kFallback };
/// "exact", "nearest", "arch-default", "heuristic", "fallback".
std::string_view to_string(Provenance p);

/// The `shape_key` of a row that holds the op's architecture default for its fingerprint.
inline constexpr std::string_view kArchDefaultShape = "*";

/// Kernel name → the version this build implements. Rows tuned for another version are
/// skipped (see RecommendationTable).
using KernelVersions = std::map<std::string, int, std::less<>>;

/// One row of `recommendations` (DESIGN.md §7).
struct Recommendation {
  std::string fingerprint;  ///< DeviceFingerprint::key() of the device it was tuned on.
  std::string op;           ///< Operator overload (`aten::addmm`) or fusion pattern name.
  std::string shape_key;    ///< ShapeKey canonical form, or kArchDefaultShape.
  std::string kernel;
  int kernel_version = 0;
  LaunchConfig config;
  std::optional<std::string> fusion;  ///< Measured fusion decision; nullopt when none.
  double median_ns = std::numeric_limits<double>::quiet_NaN();          ///< NaN when unknown.
  double gain_over_default = std::numeric_limits<double>::quiet_NaN();  ///< Default / this.
  /// The default config's median where the gain was measured (the tuner's finals); NaN when
  /// unknown. Kept by the database and its SQLite exports, not by headers or JSON.
  double default_median_ns = std::numeric_limits<double>::quiet_NaN();
  double gain_low = std::numeric_limits<double>::quiet_NaN();   ///< 95% interval of the gain,
  double gain_high = std::numeric_limits<double>::quiet_NaN();  ///< NaN when unknown.
  std::optional<std::int64_t> source_run;  ///< runs.id in the database that tuned it.
  std::string created_at;                  ///< ISO 8601 UTC; empty = "now" when written.
};

/// A recommendation as a generated header spells it: plain data with string literals (see
/// export_header()). `fusion` is nullptr when there is none, `source_run` -1.
struct CompiledRecommendation {
  const char* fingerprint;
  const char* op;
  const char* shape_key;
  const char* kernel;
  int kernel_version;
  const char* config;
  const char* fusion;
  double median_ns;
  double gain_over_default;
  std::int64_t source_run;
  const char* created_at;
};

/// An immutable table of tuned launch configurations for one device fingerprint. Lookups
/// are const, take no lock and allocate nothing; see Note [Lookup order] in
/// recommendation_table.cpp.
///
///   auto table = RecommendationTable::load("tuned.ka.db", cpu_fingerprint(), versions);
///   if (auto pick = table.lookup(key)) use(*pick->config, pick->provenance);
///   else use(descriptor.default_config(key), Provenance::kHeuristic);
class RecommendationTable {
 public:
  /// One answer. `kernel`, `config` and `fusion` point into the table and stay valid while
  /// it lives, moves included.
  struct Pick {
    std::string_view kernel;
    int kernel_version = 0;
    const LaunchConfig* config = nullptr;  ///< Never null in an answer.
    Provenance provenance = Provenance::kExact;  ///< Never kHeuristic: the table answered.
    /// Median measured for exactly this shape; NaN for every other provenance.
    double expected_runtime_ns = std::numeric_limits<double>::quiet_NaN();
    /// 0 for kExact; the log-shape distance to the tuned shape for kNearestShape (see Note
    /// [Shape distance]); +infinity for kArchDefault.
    double distance = std::numeric_limits<double>::infinity();
    std::string_view fusion;  ///< Measured fusion decision; empty when none.
  };

  /// Rows left out because they must not be used on this device and build.
  struct SkipCounts {
    std::size_t other_fingerprint = 0;  ///< Tuned on another device.
    std::size_t stale_version = 0;      ///< Tuned for another version of the kernel.
    std::size_t unknown_kernel = 0;     ///< The kernel is not in this build's KernelVersions.
    [[nodiscard]] std::size_t total() const noexcept {
      return other_fingerprint + stale_version + unknown_kernel;
    }
  };

  /// An empty table: every lookup answers nullopt.
  RecommendationTable() = default;
  /// Move-only: answers point into the table's rows.
  RecommendationTable(const RecommendationTable&) = delete;
  RecommendationTable& operator=(const RecommendationTable&) = delete;
  RecommendationTable(RecommendationTable&&) noexcept = default;
  RecommendationTable& operator=(RecommendationTable&&) noexcept = default;

  /// Keeps the rows tuned on `fingerprint` for the kernel versions in `current`; the others
  /// are skipped, counted (skipped()) and logged once per distinct mismatch. Throws
  /// ka::ValueError on a malformed shape key or two rows for one (op, shape, kernel).
  /// `device_json` is the device's fields as a JSON object.
  RecommendationTable(std::string fingerprint, std::vector<Recommendation> rows,
                      const KernelVersions& current, std::string device_json = "{}");

  /// Loads the rows for `fingerprint` from a ka database or an export (export_sqlite()),
  /// read-only. Rows of `siblings` (this machine's other devices: its CPU beside its GPU)
  /// are skipped and counted like any other device's but logged at debug level only, since
  /// one table may hold both. Throws ka::DbError naming the file when it cannot be read, its
  /// schema version has no recommendations (< 2) or is newer than this build, or a row is
  /// malformed.
  static RecommendationTable load(const std::string& path, std::string_view fingerprint,
                                  const KernelVersions& current,
                                  const std::vector<std::string>& siblings = {});
  static RecommendationTable load(const std::string& path, const DeviceFingerprint& fingerprint,
                                  const KernelVersions& current) {
    return load(path, fingerprint.key(), current);
  }

  /// The table a generated header compiled in (export_header()); same rules as the
  /// constructor, and ka::ValueError on a malformed config.
  static RecommendationTable from_compiled(const CompiledRecommendation* rows, std::size_t count,
                                           std::string_view fingerprint,
                                           const KernelVersions& current,
                                           std::string_view device_json);

  /// Best known configuration for `key` (exact → nearest → arch default), or nullopt.
  [[nodiscard]] std::optional<Pick> lookup(const ShapeKey& key) const noexcept {
    return lookup(key.op(), key);
  }
  /// As lookup(key), for rows stored under `op` (a fusion pattern's name, say) instead of
  /// key.op().
  [[nodiscard]] std::optional<Pick> lookup(std::string_view op, const ShapeKey& key) const noexcept;


  /// DeviceFingerprint::key() the table serves.
  [[nodiscard]] const std::string& fingerprint() const noexcept { return fingerprint_; }
  /// The device's fields as a JSON object ("{}" when unknown).
  [[nodiscard]] const std::string& device_json() const noexcept { return device_json_; }
  /// The rows in use, sorted by (op, shape_key, kernel).
  [[nodiscard]] const std::vector<Recommendation>& entries() const noexcept { return entries_; }
  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
  [[nodiscard]] const SkipCounts& skipped() const noexcept { return skipped_; }

 private:
  // A k-d tree node over a bucket's points; see Note [Nearest-shape index].
  struct KdNode {
    double split = 0.0;
    std::uint32_t dim = 0;
    std::uint32_t begin = 0;  // points [begin, end) when a leaf
    std::uint32_t end = 0;
    std::uint32_t left = 0;  // children; 0 = leaf (the root, node 0, is nobody's child)
    std::uint32_t right = 0;
  };
  // One distinct (op, shape) with the entry that answers for it.
  struct Shape {
    std::uint32_t entry = 0;
    std::uint64_t hash = 0;  // ShapeKey::hash() of the shape text
  };
  // Shapes of one (op, dtypes, ranks, contiguity), indexed for nearest-neighbour search.
  struct Bucket {
    std::string op;
    std::vector<TensorSpec> signature;  // sizes hold only the rank (one 0 per dimension)
    std::size_t dims = 0;               // total number of sizes
    std::vector<double> coords;         // dims per point, log2(1 + size)
    std::vector<std::uint32_t> shapes;  // point -> index in shapes_
    std::vector<KdNode> nodes;          // empty: search by a linear scan
    std::vector<double> bounds;         // per node: lo[dims], hi[dims] of its points
  };

  void build(std::vector<Recommendation> rows, const KernelVersions& current,
             std::string_view source, const std::vector<std::string>& siblings = {});
  void build_tree(Bucket& bucket);
  struct ExactRecord;
  [[nodiscard]] const ExactRecord* find_exact(std::string_view op,
                                              const ShapeKey& key) const noexcept;
  [[nodiscard]] std::optional<std::pair<std::uint32_t, double>> find_nearest(
      const Bucket& bucket, const ShapeKey& key) const noexcept;
  [[nodiscard]] Pick make_pick(std::uint32_t entry, Provenance provenance,
                               double distance) const noexcept;
  [[nodiscard]] const Bucket* find_bucket(std::string_view op, const ShapeKey& key) const noexcept;

  std::string fingerprint_;
  std::string device_json_ = "{}";
  std::vector<Recommendation> entries_;
  SkipCounts skipped_;
  std::vector<Shape> shapes_;
  // Exact index: open addressing on ShapeKey::hash() into exact_ (record + 1; 0 = empty).
  // See Note [Exact index] in recommendation_table.cpp.
  struct Slot {
    std::uint64_t hash = 0;
    std::uint32_t record = 0;
  };
  static constexpr std::size_t kInlineKey = 112;
  struct ExactRecord {
    Pick pick;  // the kExact answer, pointing into entries_
    std::uint32_t entry = 0;
    std::uint32_t op_size = 0;
    std::uint32_t text_size = 0;
    char key[kInlineKey] = {};  // op then shape text, when op_size + text_size <= kInlineKey
  };
  std::vector<Slot> slots_;
  std::vector<ExactRecord> exact_;
  std::vector<std::pair<std::string, std::uint32_t>> defaults_;  // op -> entry, sorted
  std::vector<Bucket> buckets_;
  std::vector<std::pair<std::uint64_t, std::uint32_t>> bucket_index_;  // signature hash
};

}  // namespace ka::db
