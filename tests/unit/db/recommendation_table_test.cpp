#include <ka/core/error.hpp>
#include <ka/core/logging.hpp>
#include <ka/db/recommendation_io.hpp>
#include <ka/db/recommendation_table.hpp>
#include <ka/db/results_store.hpp>
#include <ka/db/schema.hpp>
#include <ka/db/sqlite.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/ostream_sink.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

namespace ka::db {
namespace {
namespace fs = std::filesystem;

const std::string kFp = "cpu|Test CPU|avx512|cores=2|l1d=48K|l2=1024K|l3=32768K";
const KernelVersions kVersions = {{"gemm_a", 1}, {"gemm_b", 3}};

TensorSpec t(std::vector<std::int64_t> sizes, DType dtype = DType::kFloat32,
             bool contiguous = true) {
  return {dtype, std::move(sizes), contiguous};
}

ShapeKey mm(std::int64_t m, std::int64_t k, std::int64_t n, DType dtype = DType::kFloat32,
            bool contiguous_b = true) {
  return ShapeKey("aten::mm", {t({m, k}, dtype), t({k, n}, dtype, contiguous_b)});
}

// Configs are told apart by grid.x = the row's id.
Recommendation row(const std::string& shape, const std::string& kernel, int version,
                   std::int64_t id, double median_ns, const std::string& fingerprint = kFp) {
  Recommendation r;
  r.fingerprint = fingerprint;
  r.op = shape == "*" ? "aten::mm" : ShapeKey::parse(shape).op();
  r.shape_key = shape;
  r.kernel = kernel;
  r.kernel_version = version;
  r.config.grid = {id, 1, 1};
  r.config.set("tile_k", 64);
  r.median_ns = median_ns;
  r.gain_over_default = 1.5;
  r.source_run = 7;
  return r;
}

std::vector<Recommendation> rows() {
  return {
      row(mm(64, 64, 64).str(), "gemm_a", 1, 1, 100.0),
      row(mm(512, 512, 512).str(), "gemm_a", 1, 2, 1000.0),
      row(mm(512, 512, 512).str(), "gemm_b", 3, 3, 900.0),
      row(mm(1024, 64, 1024).str(), "gemm_b", 3, 4, 2000.0),
      row(mm(128, 4096, 128).str(), "gemm_a", 1, 5, 3000.0),
      row("*", "gemm_a", 1, 6, std::numeric_limits<double>::quiet_NaN()),
      row(mm(512, 512, 512, DType::kFloat16).str(), "gemm_a", 1, 7, 500.0),
      row("aten::bmm(f32[8,64,64]c,f32[8,64,64]c)", "gemm_b", 3, 8, 10.0),
      // Must never be used: another device, an old kernel version, an unknown kernel.
      row(mm(300, 300, 300).str(), "gemm_a", 1, 9, 1.0, "cpu|Other CPU|avx2|cores=64"),
      row(mm(256, 256, 256).str(), "gemm_a", 0, 10, 1.0),
      row(mm(2048, 2048, 2048).str(), "gemm_z", 1, 11, 1.0),
  };
}

std::int64_t id_of(const RecommendationTable::Pick& pick) { return pick.config->grid.x; }

// |log2(1+a) - log2(1+b)| summed: Note [Shape distance], computed independently.
double distance(std::vector<double> a, std::vector<double> b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    d += std::fabs(std::log2(1 + a[i]) - std::log2(1 + b[i]));
  return d;
}

class RecommendationTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ka_rec_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static void expect_same_picks(const RecommendationTable& a, const RecommendationTable& b) {
    for (const ShapeKey& key :
         {mm(64, 64, 64), mm(512, 512, 512), mm(600, 500, 480), mm(900, 64, 900),
          mm(7, 7, 7, DType::kFloat16), mm(512, 512, 512, DType::kFloat64), mm(256, 256, 256)}) {
      const auto x = a.lookup(key);
      const auto y = b.lookup(key);
      ASSERT_EQ(x.has_value(), y.has_value()) << key.str();
      if (!x) continue;
      EXPECT_EQ(x->provenance, y->provenance) << key.str();
      EXPECT_EQ(x->kernel, y->kernel) << key.str();
      EXPECT_EQ(*x->config, *y->config) << key.str();
      EXPECT_EQ(x->distance, y->distance) << key.str();
    }
  }

  fs::path dir_;
};

TEST_F(RecommendationTableTest, ExactMatchCarriesItsMedianAndProvenance) {
  const RecommendationTable table(kFp, rows(), kVersions);
  const auto pick = table.lookup(mm(64, 64, 64));
  ASSERT_TRUE(pick.has_value());
  EXPECT_EQ(pick->provenance, Provenance::kExact);
  EXPECT_EQ(id_of(*pick), 1);
  EXPECT_EQ(pick->kernel, "gemm_a");
  EXPECT_EQ(pick->kernel_version, 1);
  EXPECT_EQ(pick->expected_runtime_ns, 100.0);
  EXPECT_EQ(pick->distance, 0.0);
  EXPECT_TRUE(pick->fusion.empty());
  EXPECT_EQ(to_string(pick->provenance), "exact");
}

TEST_F(RecommendationTableTest, TheFasterKernelAnswersForAShape) {
  const RecommendationTable table(kFp, rows(), kVersions);
  const auto pick = table.lookup(mm(512, 512, 512));
  ASSERT_TRUE(pick.has_value());
  EXPECT_EQ(pick->kernel, "gemm_b");
  EXPECT_EQ(id_of(*pick), 3);
  EXPECT_EQ(pick->expected_runtime_ns, 900.0);
}

TEST_F(RecommendationTableTest, NearestShapeIsTheHandCheckedNeighbour) {
  const RecommendationTable table(kFp, rows(), kVersions);
  // 600x500 @ 500x480: 512^3 is at 0.39, 1024x64x1024 at 6.3, 64^3 at 12.2, 128x4096x128 at
  // 7.9 (M, K, K, N in log2(1 + size)).
  auto pick = table.lookup(mm(600, 500, 480));
  ASSERT_TRUE(pick.has_value());
  EXPECT_EQ(pick->provenance, Provenance::kNearestShape);
  EXPECT_EQ(id_of(*pick), 3);  // 512^3, and gemm_b is its faster kernel
  EXPECT_NEAR(pick->distance, distance({600, 500, 500, 480}, {512, 512, 512, 512}), 1e-12);
  EXPECT_TRUE(std::isnan(pick->expected_runtime_ns));

  // 900x64 @ 64x900: 1024x64x1024 (0.37) beats 512^3 (7.6).
  pick = table.lookup(mm(900, 64, 900));
  ASSERT_TRUE(pick.has_value());
  EXPECT_EQ(id_of(*pick), 4);
  EXPECT_NEAR(pick->distance, distance({900, 64, 64, 900}, {1024, 64, 64, 1024}), 1e-12);

  // 100x3000 @ 3000x100: 128x4096x128 (1.6) beats 512^3 (7.1) though 512 is nearer in M and N
  // on a linear scale for K's sake... on a log scale K decides.
  pick = table.lookup(mm(100, 3000, 100));
  ASSERT_TRUE(pick.has_value());
  EXPECT_EQ(id_of(*pick), 5);
  EXPECT_NEAR(pick->distance, distance({100, 3000, 3000, 100}, {128, 4096, 4096, 128}), 1e-12);
}

TEST_F(RecommendationTableTest, NothingCrossesDtypeRankLayoutOrOp) {
  const RecommendationTable table(kFp, rows(), kVersions);
  // f16 only sees the f16 row, however far.
  auto pick = table.lookup(mm(7, 7, 7, DType::kFloat16));
  ASSERT_TRUE(pick.has_value());
  EXPECT_EQ(pick->provenance, Provenance::kNearestShape);
  EXPECT_EQ(id_of(*pick), 7);
  // No f64 rows, no 3-d mm rows, no strided rows: the op's arch default.
  for (const ShapeKey& key :
       {mm(512, 512, 512, DType::kFloat64), mm(512, 512, 512, DType::kFloat32, false),
        ShapeKey("aten::mm", {t({2, 64, 64}), t({64, 64})})}) {
    pick = table.lookup(key);
    ASSERT_TRUE(pick.has_value()) << key.str();
    EXPECT_EQ(pick->provenance, Provenance::kArchDefault) << key.str();
    EXPECT_EQ(id_of(*pick), 6) << key.str();
    EXPECT_TRUE(std::isinf(pick->distance));
  }
  // bmm sees only bmm.
  pick = table.lookup(ShapeKey("aten::bmm", {t({8, 512, 512}), t({8, 512, 512})}));
  ASSERT_TRUE(pick.has_value());
  EXPECT_EQ(pick->provenance, Provenance::kNearestShape);
  EXPECT_EQ(id_of(*pick), 8);
  // An op without rows and without a default: nothing.
  EXPECT_FALSE(table.lookup(ShapeKey("aten::add.Tensor", {t({512, 512}), t({512, 512})})));
}

TEST_F(RecommendationTableTest, OtherDevicesAndKernelVersionsAreSkippedAndCounted) {
  const RecommendationTable table(kFp, rows(), kVersions);
  EXPECT_EQ(table.size(), 8U);
  EXPECT_EQ(table.skipped().other_fingerprint, 1U);
  EXPECT_EQ(table.skipped().stale_version, 1U);
  EXPECT_EQ(table.skipped().unknown_kernel, 1U);
  EXPECT_EQ(table.skipped().total(), 3U);
  // The skipped rows' shapes are not exact matches, and their configs never come back.
  for (const ShapeKey& key : {mm(300, 300, 300), mm(256, 256, 256), mm(2048, 2048, 2048)}) {
    const auto pick = table.lookup(key);
    ASSERT_TRUE(pick.has_value());
    EXPECT_EQ(pick->provenance, Provenance::kNearestShape) << key.str();
    EXPECT_LT(id_of(*pick), 9) << key.str();
  }
  // A table for the other device sees only its row.
  const RecommendationTable other("cpu|Other CPU|avx2|cores=64", rows(), kVersions);
  EXPECT_EQ(other.size(), 1U);
  EXPECT_EQ(other.skipped().other_fingerprint, 10U);
  EXPECT_EQ(id_of(*other.lookup(mm(300, 300, 300))), 9);
}

TEST_F(RecommendationTableTest, EachDistinctMismatchIsLoggedOnce) {
  std::ostringstream captured;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(captured);
  log().sinks().push_back(sink);
  std::vector<Recommendation> stale;
  for (std::int64_t i = 0; i < 5; ++i)
    stale.push_back(row(mm(i + 1, 8, 8).str(), "gemm_a", 0, i, 1.0));
  const RecommendationTable table(kFp, stale, kVersions);
  log().sinks().pop_back();
  EXPECT_EQ(table.skipped().stale_version, 5U);
  const std::string text = captured.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_NE(
      text.find("5 recommendation(s) for kernel 'gemm_a' version 0 (this build has version 1)"),
      std::string::npos)
      << text;
}

TEST_F(RecommendationTableTest, BadRowsAreRefused) {
  auto dup = rows();
  dup.push_back(dup.front());
  EXPECT_THROW(RecommendationTable(kFp, dup, kVersions), ValueError);
  auto bad = rows();
  bad.front().shape_key = "aten::mm(f32[1,x]c)";
  try {
    RecommendationTable table(kFp, bad, kVersions);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("aten::mm(f32[1,x]c)"), std::string::npos) << e.what();
  }
}

TEST_F(RecommendationTableTest, KdTreeAgreesWithABruteForceScan) {
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> log_size(0.0, 13.0);
  auto size = [&] { return static_cast<std::int64_t>(std::exp2(log_size(rng))); };
  std::vector<Recommendation> many;
  std::vector<ShapeKey> keys;
  for (std::int64_t i = 0; i < 3000; ++i) {
    const ShapeKey key("aten::addmm", {t({size()}), t({size(), size()}), t({size(), size()})});
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
    keys.push_back(key);
    many.push_back(row(key.str(), "gemm_a", 1, i, 1.0));
  }
  const RecommendationTable table(kFp, many, kVersions);
  auto coords = [](const ShapeKey& k) {
    std::vector<double> c;
    for (const TensorSpec& s : k.args()) {
      for (const std::int64_t v : s.sizes) c.push_back(static_cast<double>(v));
    }
    return c;
  };
  for (int q = 0; q < 500; ++q) {
    const ShapeKey query("aten::addmm", {t({size()}), t({size(), size()}), t({size(), size()})});
    double best = std::numeric_limits<double>::infinity();
    for (const ShapeKey& k : keys) best = std::min(best, distance(coords(query), coords(k)));
    const auto pick = table.lookup(query);
    ASSERT_TRUE(pick.has_value());
    if (pick->provenance == Provenance::kExact) continue;
    EXPECT_NEAR(pick->distance, best, 1e-9) << query.str();
    const ShapeKey& chosen = keys[static_cast<std::size_t>(
        std::find_if(many.begin(), many.end(),
                     [&](const Recommendation& r) { return r.config.grid.x == id_of(*pick); }) -
        many.begin())];
    EXPECT_NEAR(distance(coords(query), coords(chosen)), best, 1e-9) << query.str();
  }
}

TEST_F(RecommendationTableTest, ShapesWithVeryManySizesAreSearchedToo) {
  // 40 rank-2 tensors: 80 sizes, past the k-d tree's limit, so the bucket is scanned.
  auto key = [](std::int64_t a, std::int64_t b) {
    std::vector<TensorSpec> args(40, t({8, 8}));
    args[0] = t({a, b});
    return ShapeKey("ka::concat_many", std::move(args));
  };
  std::vector<Recommendation> many;
  for (std::int64_t i = 0; i < 3; ++i) {
    many.push_back(row(key(std::int64_t{16} << (4 * i), 16).str(), "gemm_a", 1, i + 1, 1.0));
  }
  const RecommendationTable table(kFp, many, kVersions);
  const auto pick = table.lookup(key(300, 16));  // 256 is nearest: 16, 256, 4096
  ASSERT_TRUE(pick.has_value());
  EXPECT_EQ(pick->provenance, Provenance::kNearestShape);
  EXPECT_EQ(id_of(*pick), 2);
  EXPECT_NEAR(pick->distance, std::fabs(std::log2(301.0) - std::log2(257.0)), 1e-12);
  EXPECT_EQ(table.lookup(key(4096, 16))->provenance, Provenance::kExact);
}

TEST_F(RecommendationTableTest, LoadsFromTheDatabaseWithTheSameRules) {
  const std::string db_path = path("ka.db");
  {
    ResultsStore store(db_path);
    store.put_recommendations(rows());
  }
  const RecommendationTable loaded = RecommendationTable::load(db_path, kFp, kVersions);
  const RecommendationTable built(kFp, rows(), kVersions);
  EXPECT_EQ(loaded.size(), built.size());
  EXPECT_EQ(loaded.skipped().other_fingerprint, 1U);
  EXPECT_EQ(loaded.skipped().stale_version, 1U);
  EXPECT_EQ(loaded.skipped().unknown_kernel, 1U);
  expect_same_picks(loaded, built);
  // Re-putting a row replaces it instead of adding one.
  {
    ResultsStore store(db_path);
    auto changed = rows();
    changed.front().config.grid.x = 99;
    store.put_recommendations({changed.front()});
    auto st = store.connection().prepare("SELECT count(*) FROM recommendations");
    ASSERT_TRUE(st.step());
    EXPECT_EQ(st.column_int64(0), static_cast<std::int64_t>(rows().size()));
  }
  EXPECT_EQ(id_of(*RecommendationTable::load(db_path, kFp, kVersions).lookup(mm(64, 64, 64))), 99);
}

TEST_F(RecommendationTableTest, LoadRefusesOldNewerAndMissingFiles) {
  {
    Connection db(path("v1.db"));
    detail::migrate_to(db, 1);
  }
  try {
    RecommendationTable::load(path("v1.db"), kFp, kVersions);
    FAIL();
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("v1.db: database schema version 1 has no recommendation"),
              std::string::npos)
        << e.what();
  }
  {
    Connection db(path("v9.db"));
    db.set_user_version(kSchemaVersion + 7);
  }
  EXPECT_THROW(RecommendationTable::load(path("v9.db"), kFp, kVersions), DbError);
  try {
    RecommendationTable::load(path("missing.db"), kFp, kVersions);
    FAIL();
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.db"), std::string::npos) << e.what();
  }
}

TEST_F(RecommendationTableTest, SqliteExportRoundTrips) {
  std::vector<Recommendation> input = rows();
  input[0].default_median_ns = 123.5;  // what the tuner's finals knew of the default
  input[0].gain_low = 1.1;
  input[0].gain_high = 1.3;
  const RecommendationTable table(kFp, input, kVersions, R"({"name":"Test CPU"})");
  const std::string out = path("table.ka.db");
  export_sqlite(table, out);
  export_sqlite(table, out);  // replaces, never appends
  EXPECT_FALSE(fs::exists(out + "-wal"));
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  const RecommendationTable back = RecommendationTable::load(out, kFp, kVersions);
  EXPECT_EQ(back.size(), table.size());
  EXPECT_EQ(back.skipped().total(), 0U);  // only the usable rows were exported
  EXPECT_EQ(back.device_json(), R"({"name":"Test CPU"})");
  for (std::size_t i = 0; i < back.size(); ++i) {
    EXPECT_EQ(back.entries()[i].shape_key, table.entries()[i].shape_key);
    EXPECT_EQ(back.entries()[i].config, table.entries()[i].config);
    EXPECT_EQ(back.entries()[i].source_run, table.entries()[i].source_run);
    for (const auto field : {&Recommendation::default_median_ns, &Recommendation::gain_low,
                             &Recommendation::gain_high}) {
      const double want = table.entries()[i].*field;
      const double got = back.entries()[i].*field;
      EXPECT_TRUE(std::isnan(want) ? std::isnan(got) : got == want) << got << " vs " << want;
    }
  }
  expect_same_picks(back, table);
  Connection db(out, Connection::Mode::kReadOnly);
  EXPECT_EQ(db.user_version(), kSchemaVersion);
  for (const auto& [sql, expected] : std::vector<std::pair<std::string, std::int64_t>>{
           {"SELECT count(*) FROM devices", 1},
           {"SELECT count(*) FROM runs", 0},
           {"SELECT count(*) FROM recommendations", static_cast<std::int64_t>(table.size())}}) {
    auto st = db.prepare(sql);
    ASSERT_TRUE(st.step());
    EXPECT_EQ(st.column_int64(0), expected) << sql;
  }
}

TEST_F(RecommendationTableTest, ImportChecksDeviceAndKernelVersions) {
  const RecommendationTable table(kFp, rows(), kVersions, R"({"name":"Test CPU"})");
  const std::string exported = path("export.ka.db");
  export_sqlite(table, exported);
  ResultsStore target(path("target.db"));
  auto count = [&] {
    auto st = target.connection().prepare("SELECT count(*) FROM recommendations");
    st.step();
    return st.column_int64(0);
  };

  auto refused = [&](std::string_view fingerprint, const KernelVersions& versions) {
    try {
      import_sqlite(exported, target.connection(), fingerprint, versions);
    } catch (const DbError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  std::string message = refused("cpu|Elsewhere", kVersions);
  EXPECT_NE(message.find(exported + ": refusing to import"), std::string::npos) << message;
  EXPECT_NE(message.find("8 row(s) tuned on device '" + kFp + "', not on 'cpu|Elsewhere'"),
            std::string::npos)
      << message;
  message = refused(kFp, {{"gemm_a", 2}, {"gemm_b", 3}});
  EXPECT_NE(message.find("5 row(s) for kernel 'gemm_a' version 1, but this build has version 2"),
            std::string::npos)
      << message;
  message = refused(kFp, {{"gemm_a", 1}});
  EXPECT_NE(message.find("3 row(s) for kernel 'gemm_b', which this build does not have"),
            std::string::npos)
      << message;
  EXPECT_EQ(count(), 0);  // a refusal writes nothing

  EXPECT_EQ(import_sqlite(exported, target.connection(), kFp, kVersions), table.size());
  EXPECT_EQ(count(), static_cast<std::int64_t>(table.size()));
  EXPECT_EQ(import_sqlite(exported, target.connection(), kFp, kVersions), table.size());
  EXPECT_EQ(count(), static_cast<std::int64_t>(table.size()));  // re-import replaces
  const RecommendationTable back = RecommendationTable::load(path("target.db"), kFp, kVersions);
  EXPECT_EQ(back.device_json(), R"({"name":"Test CPU"})");
  expect_same_picks(back, table);
}

TEST_F(RecommendationTableTest, JsonExportHoldsEveryRow) {
  auto r = rows();
  r[0].fusion = "fused";
  const RecommendationTable table(kFp, r, kVersions, R"({"name":"Test CPU"})");
  export_json(table, path("t.json"));
  std::ifstream in(path("t.json"));
  const auto doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc.at("format"), "ka.recommendations");
  EXPECT_EQ(doc.at("schema_version"), kSchemaVersion);
  EXPECT_EQ(doc.at("fingerprint"), kFp);
  EXPECT_EQ(doc.at("device").at("name"), "Test CPU");
  const auto& recs = doc.at("recommendations");
  ASSERT_EQ(recs.size(), table.size());
  for (std::size_t i = 0; i < recs.size(); ++i) {
    const Recommendation& e = table.entries()[i];
    EXPECT_EQ(recs[i].at("shape_key"), e.shape_key);
    EXPECT_EQ(recs[i].at("config"), e.config.str());
    EXPECT_EQ(recs[i].at("kernel_version"), e.kernel_version);
    EXPECT_EQ(recs[i].at("median_ns").is_null(), std::isnan(e.median_ns));
    EXPECT_EQ(recs[i].at("fusion").is_null(), !e.fusion.has_value());
  }
}

TEST_F(RecommendationTableTest, HeaderExportRefusesBadSymbolsAndEscapesText) {
  const RecommendationTable table(kFp, rows(), kVersions, "{\"q\":\"a\\\"b?\?=\"}");
  EXPECT_THROW(export_header(table, path("t.hpp"), "ns::9lives"), ValueError);
  EXPECT_THROW(export_header(table, path("t.hpp"), "ns::"), ValueError);
  EXPECT_THROW(export_header(table, path("t.hpp"), "a b"), ValueError);
  export_header(table, path("t.hpp"), "acme::tuned::cpu_table");
  std::ifstream in(path("t.hpp"));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("namespace acme::tuned {"), std::string::npos);
  EXPECT_NE(text.find("inline ka::db::RecommendationTable cpu_table(std::string_view fingerprint"),
            std::string::npos);
  EXPECT_NE(text.find(R"("{\"q\":\"a\\\"b\?\?=\"}")"), std::string::npos) << text;
  std::size_t row_lines = 0;
  for (auto at = text.find("\n    {\""); at != std::string::npos;
       at = text.find("\n    {\"", at + 1)) {
    ++row_lines;
  }
  EXPECT_EQ(row_lines, table.size()) << text;
}

}  // namespace
}  // namespace ka::db
