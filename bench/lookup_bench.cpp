// RecommendationTable lookups (ka's targets: exact <= 50 ns, nearest <= 1 us with 10,000
// entries) and the cost of building and loading a table.
//
//   ka_lookup_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <ka/db/recommendation_io.hpp>
#include <ka/db/recommendation_table.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace {

using ka::DType;
using ka::ShapeKey;
using ka::TensorSpec;
using ka::db::RecommendationTable;

const std::string kFingerprint = "cpu|bench|avx512|cores=2";
const ka::db::KernelVersions kVersions = {{"gemm_f32_blocked", 1}};

// aten::addmm(bias[N], A[M,K], B[K,N]) with M, K, N log-uniform in [1, 16384].
ShapeKey random_addmm(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> log_size(0.0, 14.0);
  auto size = [&] { return static_cast<std::int64_t>(std::exp2(log_size(rng))); };
  const std::int64_t m = size();
  const std::int64_t k = size();
  const std::int64_t n = size();
  return ShapeKey("aten::addmm", {TensorSpec{DType::kFloat32, {n}, true},
                                  TensorSpec{DType::kFloat32, {m, k}, true},
                                  TensorSpec{DType::kFloat32, {k, n}, true}});
}

struct Fixture {
  RecommendationTable table;
  std::vector<ShapeKey> tuned;    // keys in the table
  std::vector<ShapeKey> untuned;  // keys not in it (nearest-shape answers)
};

// One table per size, built once: `entries` tuned addmm shapes plus an arch default.
const Fixture& fixture(std::size_t entries) {
  static std::map<std::size_t, Fixture> cache;
  auto it = cache.find(entries);
  if (it != cache.end()) return it->second;
  std::mt19937_64 rng(2026);
  std::set<std::string> seen;
  std::vector<ka::db::Recommendation> rows;
  Fixture f;
  while (rows.size() < entries) {
    ShapeKey key = random_addmm(rng);
    if (!seen.insert(key.str()).second) continue;
    ka::db::Recommendation r;
    r.fingerprint = kFingerprint;
    r.op = key.op();
    r.shape_key = key.str();
    r.kernel = "gemm_f32_blocked";
    r.kernel_version = 1;
    r.config.block = {64, 64, 1};
    r.config.set("tile_k", static_cast<std::int64_t>(rows.size() % 512));
    r.median_ns = 1000.0;
    rows.push_back(std::move(r));
    f.tuned.push_back(std::move(key));
  }
  ka::db::Recommendation fallback = rows.front();
  fallback.shape_key = "*";
  rows.push_back(fallback);
  while (f.untuned.size() < 4096) {
    ShapeKey key = random_addmm(rng);
    if (seen.count(key.str()) == 0) f.untuned.push_back(std::move(key));
  }
  f.table = RecommendationTable(kFingerprint, std::move(rows), kVersions);
  return cache.emplace(entries, std::move(f)).first->second;
}

// Looks up keys[0 .. working_set) in turn, round and round.
void cycle_lookups(benchmark::State& state, const RecommendationTable& table,
                   const std::vector<ShapeKey>& keys, std::size_t working_set, const char* label) {
  const std::size_t n = std::min(working_set, keys.size());
  std::size_t i = 0;
  for (auto _ : state) {
    auto pick = table.lookup(keys[i]);
    benchmark::DoNotOptimize(pick);
    if (++i == n) i = 0;
  }
  state.SetLabel(label);
}

void BM_LookupExact(benchmark::State& state) {
  const Fixture& f = fixture(static_cast<std::size_t>(state.range(0)));
  cycle_lookups(state, f.table, f.tuned, f.tuned.size(), "exact");
}

// The same table, queried with a working set of 64 shapes (a model's GEMMs called over and
// over, as the extractor sees them): the table's hot path, in cache.
void BM_LookupExactHot(benchmark::State& state) {
  const Fixture& f = fixture(static_cast<std::size_t>(state.range(0)));
  cycle_lookups(state, f.table, f.tuned, 64, "exact, 64 hot shapes");
}

void BM_LookupNearestHot(benchmark::State& state) {
  const Fixture& f = fixture(static_cast<std::size_t>(state.range(0)));
  cycle_lookups(state, f.table, f.untuned, 64, "nearest, 64 hot shapes");
}

void BM_LookupNearest(benchmark::State& state) {
  const Fixture& f = fixture(static_cast<std::size_t>(state.range(0)));
  cycle_lookups(state, f.table, f.untuned, f.untuned.size(), "nearest");
}

void BM_LookupArchDefault(benchmark::State& state) {
  const Fixture& f = fixture(static_cast<std::size_t>(state.range(0)));
  // f64: no bucket, so the op's '*' row answers.
  const ShapeKey key("aten::addmm", {TensorSpec{DType::kFloat64, {64}, true},
                                     TensorSpec{DType::kFloat64, {64, 64}, true},
                                     TensorSpec{DType::kFloat64, {64, 64}, true}});
  for (auto _ : state) {
    auto pick = f.table.lookup(key);
    benchmark::DoNotOptimize(pick);
  }
  state.SetLabel("arch-default");
}

void BM_BuildTable(benchmark::State& state) {
  const Fixture& f = fixture(static_cast<std::size_t>(state.range(0)));
  const std::vector<ka::db::Recommendation> rows = f.table.entries();
  for (auto _ : state) {
    RecommendationTable table(kFingerprint, rows, kVersions);
    benchmark::DoNotOptimize(table);
  }
}

void BM_LoadSqliteExport(benchmark::State& state) {
  const Fixture& f = fixture(static_cast<std::size_t>(state.range(0)));
  const std::string path =
      (std::filesystem::temp_directory_path() / "ka_lookup_bench.ka.db").string();
  ka::db::export_sqlite(f.table, path);
  for (auto _ : state) {
    auto table = RecommendationTable::load(path, kFingerprint, kVersions);
    benchmark::DoNotOptimize(table);
  }
  std::filesystem::remove(path);
}

BENCHMARK(BM_LookupExact)->Arg(1000)->Arg(10000)->Arg(100000);
BENCHMARK(BM_LookupExactHot)->Arg(10000);
BENCHMARK(BM_LookupNearestHot)->Arg(10000);
BENCHMARK(BM_LookupNearest)->Arg(1000)->Arg(10000)->Arg(100000);
BENCHMARK(BM_LookupArchDefault)->Arg(10000);
BENCHMARK(BM_BuildTable)->Arg(10000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LoadSqliteExport)->Arg(10000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
