// RecommendationTable lookups allocate nothing, counted by the replaced operator new of
// alloc_counter.cpp.
#include "alloc_counter.hpp"
#include <ka/db/recommendation_table.hpp>

#include <gtest/gtest.h>


namespace ka::db {
namespace {

ShapeKey mm(std::int64_t m, std::int64_t k, std::int64_t n, DType dtype = DType::kFloat32) {
  return ShapeKey("aten::mm", {TensorSpec{dtype, {m, k}, true}, TensorSpec{dtype, {k, n}, true}});
}

TEST(LookupAllocTest, LookupsAllocateNothing) {
  const long at_start = ka_test_allocation_count();
  std::vector<Recommendation> rows;
  for (std::int64_t i = 1; i <= 200; ++i) {
    Recommendation r;
    r.fingerprint = "cpu|t";
    r.op = "aten::mm";
    r.shape_key = mm(i * 7, i * 3 + 1, 4096 / i).str();
    r.kernel = "gemm_with_a_name_longer_than_small_string_buffers";
    r.kernel_version = 1;
    r.config.set("tile_k", i);
    r.config.set("unroll_with_a_long_parameter_name", 4);
    r.fusion = "a fusion decision longer than a small string buffer";
    rows.push_back(r);
  }
  Recommendation fallback = rows.front();
  fallback.shape_key = "*";
  rows.push_back(fallback);
  const RecommendationTable table("cpu|t", rows, {{rows.front().kernel, 1}});
  const std::vector<ShapeKey> exact = {mm(7, 4, 4096), mm(700, 301, 40), mm(1400, 601, 20)};
  const std::vector<ShapeKey> nearest = {mm(8, 4, 4000), mm(5000, 5000, 5000)};
  const ShapeKey other_dtype = mm(7, 4, 4096, DType::kFloat16);

  const long before = ka_test_allocation_count();
  EXPECT_GT(before - at_start, 200);  // the counter sees this binary's allocations
  int provenance_sum = 0;
  for (int round = 0; round < 100; ++round) {
    for (const ShapeKey& key : exact) {
      provenance_sum += static_cast<int>(table.lookup(key)->provenance);
    }
    for (const ShapeKey& key : nearest) {
      provenance_sum += static_cast<int>(table.lookup(key)->provenance);
    }
    provenance_sum += static_cast<int>(table.lookup(other_dtype)->provenance);
  }
  const long after = ka_test_allocation_count();
  EXPECT_EQ(after - before, 0);
  // 6 exact (0) + 2 nearest (1) + 1 arch default (2) per round.
  EXPECT_EQ(provenance_sum, 100 * (2 * 1 + 2));
}

}  // namespace
}  // namespace ka::db
