#include <ka/core/error.hpp>
#include <ka/core/logging.hpp>
#include <ka/db/queries.hpp>
#include <ka/db/recommendation_table.hpp>
#include <ka/db/schema.hpp>
#include <ka/db/sqlite.hpp>

#include "recommendation_rows.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>
#include <tuple>
#include <utility>

// Note [Validated rows]
// Every reader of `recommendations` (RecommendationTable::load, ka-db import, merge, diff and
// show) goes through read_recommendations(), which refuses, naming the file and row id, a row
// ka could not have written: a NULL where ka always writes a value, text where a number
// belongs (SQLite would read 'abc' as 0.0), a median or gain that is not finite and > 0 (a
// median of -1e308 would win every later merge), a shape key that does not parse. So a
// merge checks each row exactly as an import does, before its transaction writes anything.

// Note [Lookup order]
// lookup(op, key) answers, in this order:
//   1. exact: a row for `op` whose shape key equals key.str() (provenance kExact);
//   2. nearest: among the rows for `op` whose shape has the same dtypes, ranks and contiguity
//      as `key` (a "bucket"), the tuned shape at the smallest distance (kNearestShape; see
//      Note [Shape distance]); ties go to the smaller shape key in string order;
//   3. arch default: the op's row with shape key '*' (kArchDefault);
//   4. nullopt: the caller uses its kernel's heuristic (provenance kHeuristic).
// When several kernels have a row for one (op, shape), the one with the smallest median
// answers (unknown medians last, then kernel name order), so a shape has one answer.
// Nothing crosses an op, a dtype, a rank or a layout: a config tuned for f32 is never
// offered for f16, nor a 2-d shape's for a 3-d one.
//
// Note [Shape distance]
// Distance between two shapes of one bucket = sum over every size of every tensor argument
// of |log2(1 + a) - log2(1 + b)| (L1 in log-shape space). Log scale because kernels care about
// ratios (512 vs 1024 is as far apart as 2048 vs 4096); L1 rather than Euclidean because it
// reads simply: a distance of 1 is one factor of two in one dimension, and two dimensions
// each off by 2x are as far as one off by 4x. The 1 + keeps size 0 finite.
//
// Note [Exact index]
// The exact path is one probe of a half-full open-addressing table of (hash, record) slots,
// keyed by ShapeKey::hash() (computed once, when the key is made), then one record: the
// finished kExact Pick followed by the op and shape text it answers for, compared in full
// (a hash match alone is never trusted). With the text inline, the record is three adjacent
// cache lines, so a lookup touches two places in memory and allocates nothing. Text too long
// to inline (over kInlineKey bytes) is compared against the row itself.
//
// Note [Nearest-shape index]
// Each bucket keeps its points (log coordinates) in a k-d tree: split at the median of the
// dimension of largest spread, leaves of at most kLeafSize points, nodes stored flat with the
// bounding box of their points. The search descends into the child whose box is nearer
// first and skips any subtree whose box is farther (L1) than the best point found so far.
// With 10,000 random addmm shapes it visits a few dozen nodes and two or three leaves:
// under a microsecond (bench/lookup_bench.cpp). Buckets with more than kMaxTreeDims sizes in
// all (none in practice) are scanned linearly.

namespace ka::db {
namespace {

constexpr std::size_t kLeafSize = 16;
constexpr std::size_t kMaxTreeDims = 64;

// One multiply per 64-bit word (the finaliser of MurmurHash3): signature hashing runs on every
// lookup that misses the exact index, so it reads words, not bytes.
std::uint64_t mix(std::uint64_t h, std::uint64_t word) noexcept {
  h ^= word;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

// Hash of (op, dtype/rank/contiguity of each argument); allocates nothing.
std::uint64_t signature_hash(std::string_view op, const std::vector<TensorSpec>& args) noexcept {
  std::uint64_t h = 0x9e3779b97f4a7c15ULL ^ op.size();
  for (std::size_t i = 0; i < op.size(); i += 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, op.data() + i, std::min<std::size_t>(8, op.size() - i));
    h = mix(h, word);
  }
  h = mix(h, args.size());
  for (const TensorSpec& t : args) {
    h = mix(h, (static_cast<std::uint64_t>(t.dtype) << 40) |
                   (static_cast<std::uint64_t>(t.transposed) << 33) |
                   (static_cast<std::uint64_t>(t.contiguous) << 32) | t.sizes.size());
  }
  return h;
}

bool same_signature(const std::vector<TensorSpec>& signature,
                    const std::vector<TensorSpec>& args) noexcept {
  if (signature.size() != args.size()) return false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (signature[i].dtype != args[i].dtype || signature[i].sizes.size() != args[i].sizes.size() ||
        signature[i].contiguous != args[i].contiguous ||
        signature[i].transposed != args[i].transposed) {
      return false;
    }
  }
  return true;
}

double log_size(std::int64_t size) noexcept { return std::log2(1.0 + static_cast<double>(size)); }

// Smaller median first; NaN (unknown) last.
bool faster(const Recommendation& a, const Recommendation& b) noexcept {
  const bool a_known = !std::isnan(a.median_ns);
  const bool b_known = !std::isnan(b.median_ns);
  if (a_known != b_known) return a_known;
  return a_known && a.median_ns < b.median_ns;
}

std::size_t total_dims(const std::vector<TensorSpec>& args) noexcept {
  std::size_t n = 0;
  for (const TensorSpec& t : args) n += t.sizes.size();
  return n;
}

}  // namespace

std::string_view to_string(Provenance p) {
  switch (p) {
    case Provenance::kExact:
      return "exact";
    case Provenance::kNearestShape:
      return "nearest";
    case Provenance::kArchDefault:
      return "arch-default";
    case Provenance::kHeuristic:
      return "heuristic";
    case Provenance::kFallback:
      return "fallback";
  }
  return "heuristic";
}

RecommendationTable::RecommendationTable(std::string fingerprint, std::vector<Recommendation> rows,
                                         const KernelVersions& current, std::string device_json)
    : fingerprint_(std::move(fingerprint)), device_json_(std::move(device_json)) {
  build(std::move(rows), current, "recommendation rows");
}

RecommendationTable RecommendationTable::from_compiled(const CompiledRecommendation* rows,
                                                       std::size_t count,
                                                       std::string_view fingerprint,
                                                       const KernelVersions& current,
                                                       std::string_view device_json) {
  std::vector<Recommendation> out;
  out.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    const CompiledRecommendation& c = rows[i];
    Recommendation r;
    r.fingerprint = c.fingerprint;
    r.op = c.op;
    r.shape_key = c.shape_key;
    r.kernel = c.kernel;
    r.kernel_version = c.kernel_version;
    r.config = LaunchConfig::parse(c.config);
    if (c.fusion != nullptr) r.fusion = c.fusion;
    r.median_ns = c.median_ns;
    r.gain_over_default = c.gain_over_default;
    if (c.source_run >= 0) r.source_run = c.source_run;
    r.created_at = c.created_at;
    out.push_back(std::move(r));
  }
  RecommendationTable table;
  table.fingerprint_ = std::string(fingerprint);
  table.device_json_ = std::string(device_json);
  table.build(std::move(out), current, "compiled-in table");
  return table;
}

namespace detail {

void check_table_schema(Connection& db) {
  const int version = db.user_version();
  KA_CHECK_TYPE(DbError, version <= kSchemaVersion, db.path(), ": database schema version ",
                version, " is newer than this ka supports (", kSchemaVersion, "); use a newer ka");
  KA_CHECK_TYPE(DbError, version >= 2, db.path(), ": database schema version ", version,
                " has no recommendation table (it needs version 2 or later); is this a ka "
                "database or table export?");
}

namespace {

// Why the current row of `st` (read_recommendations' columns) is not a recommendation ka
// wrote, or empty: a required column NULL, a number stored as text, a median or gain that is
// not finite and > 0, a shape key that does not parse. See Note [Validated rows].
std::string row_problem(const Statement& st) {
  static constexpr std::array<std::pair<int, const char*>, 6> kRequired = {{
      {1, "fingerprint"}, {2, "op"}, {3, "shape_key"}, {4, "kernel"}, {6, "config"},
      {11, "created_at"}}};
  for (const auto& [index, name] : kRequired) {
    if (st.column_is_null(index)) return std::string(name) + " is NULL";
  }
  if (!st.column_is_number(5) || st.column_double(5) != static_cast<double>(st.column_int64(5))) {
    return "kernel_version '" + st.column_text(5) + "' is not a whole number";
  }
  for (const auto& [index, name] : {std::pair{8, "median_ns"}, std::pair{9, "gain_over_default"}}) {
    if (st.column_is_null(index)) continue;
    if (!st.column_is_number(index) || !std::isfinite(st.column_double(index)) ||
        st.column_double(index) <= 0) {
      return std::string(name) + " '" + st.column_text(index) + "' is not a finite number > 0";
    }
  }
  if (!st.column_is_null(10) && !st.column_is_number(10)) {
    return "source_run '" + st.column_text(10) + "' is not a run id";
  }
  const std::string shape_key = st.column_text(3);
  if (shape_key == kArchDefaultShape) return {};
  try {
    (void)ShapeKey::parse(shape_key);
  } catch (const ValueError& e) {
    return e.what();
  }
  return {};
}

}  // namespace

std::vector<Recommendation> read_recommendations(Connection& db) {
  std::vector<Recommendation> rows;
  // Schema 6 added the default's time and the gain's interval; older files read them as NULL.
  const std::set<std::string> columns = column_names(db, "recommendations");
  const auto column = [&](const char* name) {
    return columns.count(name) != 0 ? std::string(name) : std::string("NULL");
  };
  auto st = db.prepare(
      "SELECT id, fingerprint, op, shape_key, kernel, kernel_version, config, fusion, median_ns, "
      "gain_over_default, source_run, created_at, " + column("default_median_ns") + ", " +
      column("gain_low") + ", " + column("gain_high") + " FROM recommendations ORDER BY id");
  // A number, or NaN for NULL and anything else: these columns only inform reports.
  const auto number = [&](int index) {
    return st.column_is_number(index) ? st.column_double(index)
                                      : std::numeric_limits<double>::quiet_NaN();
  };
  while (st.step()) {
    const std::string problem = row_problem(st);
    KA_CHECK_TYPE(DbError, problem.empty(), db.path(), ": recommendations row ",
                  st.column_int64(0), ": ", problem);
    Recommendation r;
    r.fingerprint = st.column_text(1);
    r.op = st.column_text(2);
    r.shape_key = st.column_text(3);
    r.kernel = st.column_text(4);
    r.kernel_version = static_cast<int>(st.column_int64(5));
    try {
      r.config = LaunchConfig::parse(st.column_text(6));
    } catch (const ValueError& e) {
      KA_THROW(DbError, db.path(), ": recommendations row ", st.column_int64(0), ": ", e.what());
    }
    if (!st.column_is_null(7)) r.fusion = st.column_text(7);
    if (!st.column_is_null(8)) r.median_ns = st.column_double(8);
    if (!st.column_is_null(9)) r.gain_over_default = st.column_double(9);
    if (!st.column_is_null(10)) r.source_run = st.column_int64(10);
    r.created_at = st.column_text(11);
    r.default_median_ns = number(12);
    r.gain_low = number(13);
    r.gain_high = number(14);
    rows.push_back(std::move(r));
  }
  return rows;
}

std::string read_device_json(Connection& db, std::string_view fingerprint) {
  auto st = db.prepare("SELECT fields_json FROM devices WHERE fingerprint = ?");
  st.bind(1, fingerprint);
  return st.step() ? st.column_text(0) : std::string("{}");
}

}  // namespace detail

RecommendationTable RecommendationTable::load(const std::string& path, std::string_view fingerprint,
                                              const KernelVersions& current,
                                              const std::vector<std::string>& siblings) {
  Connection db = open_for_reading(path);
  detail::check_table_schema(db);
  RecommendationTable table;
  table.fingerprint_ = std::string(fingerprint);
  table.device_json_ = detail::read_device_json(db, fingerprint);
  try {
    table.build(detail::read_recommendations(db), current, path, siblings);
  } catch (const ValueError& e) {
    KA_THROW(DbError, path, ": ", e.what());
  }
  return table;
}

void RecommendationTable::build(std::vector<Recommendation> rows, const KernelVersions& current,
                                std::string_view source, const std::vector<std::string>& siblings) {
  // 1. Keep only rows for this device and this build's kernel versions; log each distinct
  //    mismatch once, with its row count.
  std::map<std::string, std::size_t> other_devices;
  std::map<std::tuple<std::string, int, int>, std::size_t> stale;  // kernel, row, current
  std::map<std::string, std::size_t> unknown;
  for (Recommendation& r : rows) {
    if (r.fingerprint != fingerprint_) {
      ++skipped_.other_fingerprint;
      ++other_devices[r.fingerprint];
      continue;
    }
    const auto it = current.find(r.kernel);
    if (it == current.end()) {
      ++skipped_.unknown_kernel;
      ++unknown[r.kernel];
      continue;
    }
    if (it->second != r.kernel_version) {
      ++skipped_.stale_version;
      ++stale[{r.kernel, r.kernel_version, it->second}];
      continue;
    }
    entries_.push_back(std::move(r));
  }
  for (const auto& [fp, n] : other_devices) {
    if (std::find(siblings.begin(), siblings.end(), fp) != siblings.end()) {
      log().debug("{}: {} recommendation(s) for this machine's other device '{}' left to its "
                  "own table", source, n, fp);
      continue;
    }
    log().warn(
        "{}: skipping {} recommendation(s) tuned on another device '{}' (this device: "
        "'{}')",
        source, n, fp, fingerprint_);
  }
  for (const auto& [what, n] : stale) {
    log().warn(
        "{}: skipping {} recommendation(s) for kernel '{}' version {} (this build has "
        "version {}); re-tune to use them",
        source, n, std::get<0>(what), std::get<1>(what), std::get<2>(what));
  }
  for (const auto& [kernel, n] : unknown) {
    log().warn(
        "{}: skipping {} recommendation(s) for kernel '{}', which this build does not "
        "have",
        source, n, kernel);
  }

  // 2. Canonical shape keys, then one order for everything: (op, shape_key, kernel).
  std::vector<ShapeKey> keys(entries_.size());
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    Recommendation& r = entries_[i];
    if (r.shape_key == kArchDefaultShape) continue;
    try {
      keys[i] = ShapeKey::parse(r.shape_key);
    } catch (const ValueError& e) {
      KA_THROW(ValueError, "recommendation for ", r.op, " (kernel ", r.kernel, "): ", e.what());
    }
    r.shape_key = keys[i].str();
  }
  std::vector<std::size_t> order(entries_.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const Recommendation& x = entries_[a];
    const Recommendation& y = entries_[b];
    return std::tie(x.op, x.shape_key, x.kernel) < std::tie(y.op, y.shape_key, y.kernel);
  });
  {
    std::vector<Recommendation> sorted_entries;
    std::vector<ShapeKey> sorted_keys;
    sorted_entries.reserve(order.size());
    sorted_keys.reserve(order.size());
    for (const std::size_t i : order) {
      sorted_entries.push_back(std::move(entries_[i]));
      sorted_keys.push_back(std::move(keys[i]));
    }
    entries_ = std::move(sorted_entries);
    keys = std::move(sorted_keys);
  }
  KA_CHECK(entries_.size() < std::numeric_limits<std::uint32_t>::max() / 2,
           "too many recommendations: ", entries_.size());

  // 3. One answer per (op, shape): the fastest kernel.
  std::map<std::string, std::size_t> bucket_of;  // signature text -> bucket
  for (std::size_t i = 0; i < entries_.size();) {
    std::size_t best = i;
    std::size_t j = i + 1;
    for (; j < entries_.size() && entries_[j].op == entries_[i].op &&
           entries_[j].shape_key == entries_[i].shape_key;
         ++j) {
      KA_CHECK(entries_[j].kernel != entries_[j - 1].kernel, "two recommendations for ",
               entries_[j].op, " shape ", entries_[j].shape_key, " kernel ", entries_[j].kernel);
      if (faster(entries_[j], entries_[best])) best = j;
    }
    const Recommendation& r = entries_[i];
    const auto entry = static_cast<std::uint32_t>(best);
    if (r.shape_key == kArchDefaultShape) {
      defaults_.emplace_back(r.op, entry);
    } else {
      const ShapeKey& key = keys[i];
      const auto shape = static_cast<std::uint32_t>(shapes_.size());
      shapes_.push_back({entry, key.hash()});
      std::string signature = r.op + '|';
      for (const TensorSpec& t : key.args()) {
        signature += std::string(short_name(t.dtype)) + std::to_string(t.sizes.size()) +
                     (t.contiguous ? "c," : t.transposed ? "t," : "s,");
      }
      auto [it, inserted] = bucket_of.try_emplace(signature, buckets_.size());
      if (inserted) {
        Bucket b;
        b.op = r.op;
        for (const TensorSpec& t : key.args()) {
          b.signature.push_back(
              {t.dtype, std::vector<std::int64_t>(t.sizes.size(), 0), t.contiguous, t.transposed});
        }
        b.dims = total_dims(key.args());
        buckets_.push_back(std::move(b));
        bucket_index_.emplace_back(signature_hash(r.op, key.args()),
                                   static_cast<std::uint32_t>(buckets_.size() - 1));
      }
      Bucket& b = buckets_[it->second];
      for (const TensorSpec& t : key.args()) {
        for (const std::int64_t s : t.sizes) b.coords.push_back(log_size(s));
      }
      b.shapes.push_back(shape);
    }
    i = j;
  }
  std::sort(bucket_index_.begin(), bucket_index_.end());
  for (Bucket& b : buckets_) build_tree(b);

  // 4. Exact index: open addressing on ShapeKey::hash(), at most half full.
  std::size_t capacity = 8;
  while (capacity < 2 * shapes_.size()) capacity *= 2;
  // See Note [Exact index]. entries_ no longer changes, so the picks may point into it.
  slots_.assign(capacity, Slot{});
  exact_.resize(shapes_.size());
  for (std::size_t s = 0; s < shapes_.size(); ++s) {
    const Shape& shape = shapes_[s];
    const Recommendation& r = entries_[shape.entry];
    ExactRecord& record = exact_[s];
    record.pick = make_pick(shape.entry, Provenance::kExact, 0.0);
    record.entry = shape.entry;
    record.op_size = static_cast<std::uint32_t>(r.op.size());
    record.text_size = static_cast<std::uint32_t>(r.shape_key.size());
    if (r.op.size() + r.shape_key.size() <= kInlineKey) {
      std::memcpy(record.key, r.op.data(), r.op.size());
      std::memcpy(record.key + r.op.size(), r.shape_key.data(), r.shape_key.size());
    }
    std::size_t i = shape.hash & (capacity - 1);
    while (slots_[i].record != 0) i = (i + 1) & (capacity - 1);
    slots_[i] = {shape.hash, static_cast<std::uint32_t>(s + 1)};
  }
}

void RecommendationTable::build_tree(Bucket& bucket) {
  const std::size_t n = bucket.shapes.size();
  const std::size_t dims = bucket.dims;
  if (dims == 0 || dims > kMaxTreeDims) return;  // linear scan
  std::vector<std::uint32_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0U);
  const std::vector<double> coords = bucket.coords;
  auto coord = [&](std::uint32_t p, std::size_t d) { return coords[p * dims + d]; };

  // Iterative build with an explicit work list: (node, begin, end).
  bucket.nodes.emplace_back();
  std::vector<std::tuple<std::uint32_t, std::uint32_t, std::uint32_t>> work = {
      {0U, 0U, static_cast<std::uint32_t>(n)}};
  while (!work.empty()) {
    const auto [node, begin, end] = work.back();
    work.pop_back();
    bucket.nodes[node].begin = begin;
    bucket.nodes[node].end = end;
    if (end - begin <= kLeafSize) continue;
    std::size_t best_dim = 0;
    double best_spread = -1.0;
    for (std::size_t d = 0; d < dims; ++d) {
      double lo = coord(perm[begin], d);
      double hi = lo;
      for (std::uint32_t i = begin; i < end; ++i) {
        lo = std::min(lo, coord(perm[i], d));
        hi = std::max(hi, coord(perm[i], d));
      }
      if (hi - lo > best_spread) {
        best_spread = hi - lo;
        best_dim = d;
      }
    }
    if (best_spread <= 0.0) continue;  // all points equal: a leaf, however large
    const std::uint32_t mid = begin + (end - begin) / 2;
    std::nth_element(
        perm.begin() + begin, perm.begin() + mid, perm.begin() + end,
        [&](std::uint32_t a, std::uint32_t b) { return coord(a, best_dim) < coord(b, best_dim); });
    const auto left = static_cast<std::uint32_t>(bucket.nodes.size());
    bucket.nodes.emplace_back();
    bucket.nodes.emplace_back();
    KdNode& parent = bucket.nodes[node];
    parent.dim = static_cast<std::uint32_t>(best_dim);
    parent.split = coord(perm[mid], best_dim);
    parent.left = left;
    parent.right = left + 1;
    work.emplace_back(left, begin, mid);
    work.emplace_back(left + 1, mid, end);
  }
  // Points in tree order, so a node's points are a contiguous range.
  std::vector<std::uint32_t> shapes(n);
  for (std::size_t i = 0; i < n; ++i) {
    shapes[i] = bucket.shapes[perm[i]];
    for (std::size_t d = 0; d < dims; ++d) bucket.coords[i * dims + d] = coord(perm[i], d);
  }
  bucket.shapes = std::move(shapes);
  // Bounding box of every node's points: lo[dims] then hi[dims].
  bucket.bounds.assign(bucket.nodes.size() * 2 * dims, 0.0);
  for (std::size_t k = 0; k < bucket.nodes.size(); ++k) {
    const KdNode& node = bucket.nodes[k];
    double* lo = bucket.bounds.data() + k * 2 * dims;
    double* hi = lo + dims;
    for (std::size_t d = 0; d < dims; ++d) {
      lo[d] = std::numeric_limits<double>::infinity();
      hi[d] = -std::numeric_limits<double>::infinity();
      for (std::uint32_t p = node.begin; p < node.end; ++p) {
        lo[d] = std::min(lo[d], bucket.coords[p * dims + d]);
        hi[d] = std::max(hi[d], bucket.coords[p * dims + d]);
      }
    }
  }
}

const RecommendationTable::ExactRecord* RecommendationTable::find_exact(
    std::string_view op, const ShapeKey& key) const noexcept {
  if (exact_.empty()) return nullptr;
  const std::size_t mask = slots_.size() - 1;
  const std::uint64_t hash = key.hash();
  const std::string_view text = key.str();
  for (std::size_t i = hash & mask; slots_[i].record != 0; i = (i + 1) & mask) {
    if (slots_[i].hash != hash) continue;
    const ExactRecord& record = exact_[slots_[i].record - 1];
    if (record.op_size != op.size() || record.text_size != text.size()) continue;
    if (record.op_size + record.text_size <= kInlineKey) {
      if (std::memcmp(record.key, op.data(), op.size()) == 0 &&
          std::memcmp(record.key + op.size(), text.data(), text.size()) == 0) {
        return &record;
      }
    } else {
      const Recommendation& r = entries_[record.entry];
      if (r.shape_key == text && r.op == op) return &record;
    }
  }
  return nullptr;
}

const RecommendationTable::Bucket* RecommendationTable::find_bucket(
    std::string_view op, const ShapeKey& key) const noexcept {
  const std::uint64_t hash = signature_hash(op, key.args());
  auto it = std::lower_bound(bucket_index_.begin(), bucket_index_.end(),
                             std::pair<std::uint64_t, std::uint32_t>{hash, 0U});
  for (; it != bucket_index_.end() && it->first == hash; ++it) {
    const Bucket& b = buckets_[it->second];
    if (b.op == op && same_signature(b.signature, key.args())) return &b;
  }
  return nullptr;
}

std::optional<std::pair<std::uint32_t, double>> RecommendationTable::find_nearest(
    const Bucket& bucket, const ShapeKey& key) const noexcept {
  const std::size_t dims = bucket.dims;
  const std::size_t n = bucket.shapes.size();
  if (n == 0) return std::nullopt;
  double best = std::numeric_limits<double>::infinity();
  std::uint32_t best_point = 0;
  // Ties go to the smaller shape index, i.e. the smaller shape key: independent of the tree.
  auto consider = [&](std::uint32_t point, double d) {
    if (d < best || (d == best && bucket.shapes[point] < bucket.shapes[best_point])) {
      best = d;
      best_point = point;
    }
  };

  if (bucket.nodes.empty()) {  // no tree: scan, computing the query's coordinates on the fly
    for (std::uint32_t p = 0; p < n; ++p) {
      double d = 0.0;
      std::size_t j = 0;
      for (const TensorSpec& t : key.args()) {
        for (const std::int64_t s : t.sizes) {
          d += std::fabs(log_size(s) - bucket.coords[p * dims + j++]);
        }
      }
      consider(p, d);
    }
    return std::make_pair(bucket.shapes[best_point], best);
  }

  std::array<double, kMaxTreeDims> query{};
  {
    std::size_t j = 0;
    for (const TensorSpec& t : key.args()) {
      for (const std::int64_t s : t.sizes) query[j++] = log_size(s);
    }
  }
  // Depth-first, the nearer child first; a subtree is skipped when the L1 distance from the
  // query to its bounding box exceeds the best found (ties are still visited, for the tie
  // rule above). Branch-free inner loops: `dims` is small.
  struct Search {
    const KdNode* nodes;
    const double* bounds;
    const double* coords;
    const std::uint32_t* shapes;
    const double* q;
    std::size_t dims;
    double best;
    std::uint32_t best_point;

    double box(std::uint32_t node) const noexcept {
      const double* lo = bounds + static_cast<std::size_t>(node) * 2 * dims;
      const double* hi = lo + dims;
      double d = 0.0;
      for (std::size_t j = 0; j < dims; ++j) {
        d += std::max(lo[j] - q[j], 0.0) + std::max(q[j] - hi[j], 0.0);
      }
      return d;
    }

    void run(std::uint32_t node_index) noexcept {
      const KdNode& node = nodes[node_index];
      if (node.left == 0) {
        for (std::uint32_t p = node.begin; p < node.end; ++p) {
          const double* c = coords + static_cast<std::size_t>(p) * dims;
          double d = 0.0;
          for (std::size_t j = 0; j < dims; ++j) d += std::fabs(q[j] - c[j]);
          if (d < best || (d == best && shapes[p] < shapes[best_point])) {
            best = d;
            best_point = p;
          }
        }
        return;
      }
      const double left = box(node.left);
      const double right = box(node.right);
      if (left <= right) {
        if (left <= best) run(node.left);
        if (right <= best) run(node.right);
      } else {
        if (right <= best) run(node.right);
        if (left <= best) run(node.left);
      }
    }
  };
  Search search{bucket.nodes.data(),
                bucket.bounds.data(),
                bucket.coords.data(),
                bucket.shapes.data(),
                query.data(),
                dims,
                std::numeric_limits<double>::infinity(),
                0U};
  search.run(0);
  return std::make_pair(bucket.shapes[search.best_point], search.best);
}

RecommendationTable::Pick RecommendationTable::make_pick(std::uint32_t entry, Provenance provenance,
                                                         double distance) const noexcept {
  const Recommendation& r = entries_[entry];
  Pick pick;
  pick.kernel = r.kernel;
  pick.kernel_version = r.kernel_version;
  pick.config = &r.config;
  pick.provenance = provenance;
  pick.expected_runtime_ns =
      provenance == Provenance::kExact ? r.median_ns : std::numeric_limits<double>::quiet_NaN();
  pick.distance = distance;
  if (r.fusion.has_value()) pick.fusion = *r.fusion;
  return pick;
}

std::optional<RecommendationTable::Pick> RecommendationTable::lookup(
    std::string_view op, const ShapeKey& key) const noexcept {
  if (const ExactRecord* record = find_exact(op, key)) return record->pick;
  if (const Bucket* bucket = find_bucket(op, key)) {
    if (const auto nearest = find_nearest(*bucket, key)) {
      // The shape's exact answer, relabelled: its record is nearer in memory than its row.
      Pick pick = exact_[nearest->first].pick;
      pick.provenance = Provenance::kNearestShape;
      pick.expected_runtime_ns = std::numeric_limits<double>::quiet_NaN();
      pick.distance = nearest->second;
      return pick;
    }
  }
  const auto it = std::lower_bound(defaults_.begin(), defaults_.end(), op,
                                   [](const std::pair<std::string, std::uint32_t>& d,
                                      std::string_view o) { return d.first < o; });
  if (it != defaults_.end() && it->first == op) {
    return make_pick(it->second, Provenance::kArchDefault, std::numeric_limits<double>::infinity());
  }
  return std::nullopt;
}

}  // namespace ka::db
