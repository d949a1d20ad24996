// The generated header (compiled into this test at build time, see Note [Export fixture] in
// CMakeLists.txt) and the SQLite export of the same table give identical picks.
#include <ka/db/recommendation_table.hpp>

#include "export_fixture.hpp"
#include "fixture_table.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace ka::db {
namespace {

void expect_same_number(double a, double b, const std::string& what) {
  if (std::isnan(a) || std::isnan(b)) {
    EXPECT_TRUE(std::isnan(a) && std::isnan(b)) << what << ": " << a << " vs " << b;
  } else {
    EXPECT_EQ(a, b) << what;
  }
}

TEST(ExportHeaderTest, GeneratedHeaderAndSqliteExportGiveIdenticalPicks) {
  const RecommendationTable compiled =
      ka_fixture::tuned::fixture_table(fixture::kFingerprint, fixture::kernel_versions());
  const RecommendationTable loaded =
      RecommendationTable::load(KA_FIXTURE_DB, fixture::kFingerprint, fixture::kernel_versions());

  ASSERT_EQ(compiled.size(), fixture::rows().size());
  ASSERT_EQ(loaded.size(), compiled.size());
  EXPECT_EQ(compiled.skipped().total(), 0U);
  EXPECT_EQ(loaded.skipped().total(), 0U);
  EXPECT_EQ(ka_fixture::tuned::fixture_table_fingerprint, fixture::kFingerprint);
  EXPECT_EQ(compiled.device_json(), fixture::kDeviceJson);
  EXPECT_EQ(loaded.device_json(), fixture::kDeviceJson);

  for (std::size_t i = 0; i < compiled.size(); ++i) {
    const Recommendation& a = compiled.entries()[i];
    const Recommendation& b = loaded.entries()[i];
    EXPECT_EQ(a.fingerprint, b.fingerprint);
    EXPECT_EQ(a.op, b.op);
    EXPECT_EQ(a.shape_key, b.shape_key);
    EXPECT_EQ(a.kernel, b.kernel);
    EXPECT_EQ(a.kernel_version, b.kernel_version);
    EXPECT_EQ(a.config, b.config) << a.config.str() << " vs " << b.config.str();
    EXPECT_EQ(a.fusion, b.fusion);
    expect_same_number(a.median_ns, b.median_ns, "median_ns of " + a.shape_key);
    expect_same_number(a.gain_over_default, b.gain_over_default, "gain of " + a.shape_key);
    EXPECT_EQ(a.source_run, b.source_run);
    EXPECT_EQ(a.created_at, b.created_at);
  }

  std::set<Provenance> seen;
  for (const std::string& text : fixture::probe_keys()) {
    const ShapeKey key = ShapeKey::parse(text);
    const auto a = compiled.lookup(key);
    const auto b = loaded.lookup(key);
    ASSERT_EQ(a.has_value(), b.has_value()) << text;
    if (!a) {
      seen.insert(Provenance::kHeuristic);
      continue;
    }
    seen.insert(a->provenance);
    EXPECT_EQ(a->provenance, b->provenance) << text;
    EXPECT_EQ(a->kernel, b->kernel) << text;
    EXPECT_EQ(a->kernel_version, b->kernel_version) << text;
    EXPECT_EQ(*a->config, *b->config) << text;
    EXPECT_EQ(a->fusion, b->fusion) << text;
    expect_same_number(a->expected_runtime_ns, b->expected_runtime_ns, text);
    expect_same_number(a->distance, b->distance, text);
  }
  // The probes reach every answer, so the comparison covers every path.
  EXPECT_EQ(seen.size(), 4U);

  // The fusion decision and the pattern row survive the header's string literals.
  const auto fused =
      compiled.lookup("aten::addmm+aten::relu", ShapeKey::parse(fixture::probe_keys()[8]));
  ASSERT_TRUE(fused.has_value());
  EXPECT_EQ(fused->fusion, "fuse \"epilogue\"");
  EXPECT_EQ(fused->provenance, Provenance::kExact);
}

TEST(ExportHeaderTest, CompiledTableChecksTheRunningDevice) {
  const RecommendationTable other =
      ka_fixture::tuned::fixture_table("cpu|another", fixture::kernel_versions());
  EXPECT_EQ(other.size(), 0U);
  EXPECT_EQ(other.skipped().other_fingerprint, fixture::rows().size());
  EXPECT_FALSE(other.lookup(ShapeKey::parse(fixture::probe_keys()[0])).has_value());

  KernelVersions newer = fixture::kernel_versions();
  newer["gemm_b"] = 4;
  const RecommendationTable stale = ka_fixture::tuned::fixture_table(fixture::kFingerprint, newer);
  EXPECT_EQ(stale.skipped().stale_version, 3U);  // gemm_b rows: ids 3, 4 and 8
  const auto pick = stale.lookup(ShapeKey::parse(fixture::probe_keys()[1]));
  ASSERT_TRUE(pick.has_value());
  EXPECT_EQ(pick->kernel, "gemm_a");  // the slower kernel, since gemm_b's row is stale
}

}  // namespace
}  // namespace ka::db
