// Shard plans (ka-tune --shard I/N) and slices of a search space.
#include <ka/core/error.hpp>
#include <ka/tuner/search.hpp>
#include <ka/tuner/shards.hpp>

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace ka::tuner {
namespace {

TEST(Shards, ParsesIndexAndCount) {
  const ShardId id = parse_shard("2/5");
  EXPECT_EQ(id.index, 2u);
  EXPECT_EQ(id.count, 5u);
  for (const char* bad : {"5/5", "0/0", "-1/3", "1", "1/", "/3", "a/b", "1/2/3", "1.5/3"}) {
    EXPECT_THROW(parse_shard(bad), ValueError) << bad;
  }
}

// Every (shape, slice) the plan holds, with how often.
std::map<std::pair<std::string, std::pair<std::size_t, std::size_t>>, int> items_of(
    const std::vector<std::vector<ShardItem>>& plan) {
  std::map<std::pair<std::string, std::pair<std::size_t, std::size_t>>, int> out;
  for (const auto& shard : plan) {
    for (const ShardItem& item : shard) ++out[{item.shape, {item.slice.part, item.slice.parts}}];
  }
  return out;
}

// For every count of shapes and shards: no shard is empty, and the items are exactly the
// shapes (each once, whole) or, with fewer shapes than shards, every slice of each once.
TEST(Shards, PartsAreDisjointNonEmptyAndCoverTheWork) {
  const std::vector<std::string> all = {"1x4096x4096", "16x4096x11008", "128x128x128",
                                        "512x512x512", "2048x2048x2048", "8x8x8", "64x64x64"};
  for (std::size_t shapes = 1; shapes <= all.size(); ++shapes) {
    const std::vector<std::string> given(all.begin(), all.begin() + static_cast<long>(shapes));
    for (std::size_t count = 1; count <= 9; ++count) {
      const auto plan = plan_shards("aten::mm", given, count);
      ASSERT_EQ(plan.size(), count);
      for (const auto& shard : plan) EXPECT_FALSE(shard.empty()) << shapes << " shapes, " << count;
      std::map<std::string, std::set<std::size_t>> parts_of;
      std::map<std::string, std::size_t> slices_of;
      for (const auto& [item, times] : items_of(plan)) {
        EXPECT_EQ(times, 1) << item.first;
        parts_of[item.first].insert(item.second.first);
        slices_of[item.first] = item.second.second;
      }
      ASSERT_EQ(parts_of.size(), shapes);
      std::size_t total_items = 0;
      for (const auto& [shape, parts] : parts_of) {
        EXPECT_EQ(parts.size(), slices_of[shape]) << shape;  // slices 0..p-1, each once
        EXPECT_EQ(*parts.rbegin() + 1, slices_of[shape]) << shape;
        if (shapes >= count) {
          EXPECT_EQ(slices_of[shape], 1u) << shape;
        }
        total_items += parts.size();
      }
      EXPECT_EQ(total_items, std::max(shapes, count));
    }
  }
}

TEST(Shards, PlanIsDeterministicAndCountsRepeatedShapesOnce) {
  const std::vector<std::string> shapes = {"64x64x64", "8x8x8", "64x64x64", "512x512x512"};
  const auto a = plan_shards("aten::mm", shapes, 2);
  const auto b = plan_shards("aten::mm", shapes, 2);
  EXPECT_EQ(items_of(a), items_of(b));
  std::size_t items = 0;
  for (const auto& shard : a) items += shard.size();
  EXPECT_EQ(items, 3u);
}

// The heaviest shapes go to different shards (longest processing time first).
TEST(Shards, HeavyShapesAreSpreadOverShards) {
  const std::vector<std::string> shapes = {"8x8x8", "4096x4096x4096", "16x16x16", "4096x4096x4096x",
                                           "32x32x32"};
  EXPECT_THROW(plan_shards("aten::mm", shapes, 2), ValueError);  // a bad shape is refused
  const auto plan = plan_shards("aten::mm", {"8x8x8", "4096x4096x4096", "16x16x16",
                                             "4096x4096x2048", "32x32x32"}, 2);
  for (const auto& shard : plan) {
    int heavy = 0;
    for (const ShardItem& item : shard) heavy += item.shape.rfind("4096x4096", 0) == 0;
    EXPECT_EQ(heavy, 1);
  }
}

// With fewer shapes than shards, the extra slices go to the shape with the most work.
TEST(Shards, SlicesGoToTheHeaviestShape) {
  const auto plan = plan_shards("aten::mm", {"8x8x8", "2048x2048x2048"}, 4);
  const auto items = items_of(plan);
  EXPECT_EQ(items.count({"8x8x8", {0, 1}}), 1u);
  for (std::size_t j = 0; j < 3; ++j) EXPECT_EQ(items.count({"2048x2048x2048", {j, 3}}), 1u);
}

TEST(Shards, RefusesEmptyWork) {
  EXPECT_THROW(plan_shards("aten::mm", {}, 2), ValueError);
  EXPECT_THROW(plan_shards("aten::mm", {"8x8x8"}, 0), ValueError);
}

TEST(SearchSpaceSubset, KeepsPointsAndTheirNeighboursWithin) {
  const SearchSpace full(kernels::TunableSpace(
      {{"a", {1, 2, 3, 4}, ""}, {"b", {1, 2, 3}, ""}}, {}));
  std::vector<std::size_t> keep;  // every point but those with a = 2 (points 3, 4, 5)
  for (std::size_t i = 0; i < full.size(); ++i) {
    if (full.point(i).get_or("a", 0) != 2) keep.push_back(i);
  }
  const SearchSpace half = full.subset(keep);
  ASSERT_EQ(half.size(), keep.size());
  std::set<std::string> kept;
  for (std::size_t j = 0; j < half.size(); ++j) {
    EXPECT_EQ(half.point(j).str(), full.point(keep[j]).str());
    kept.insert(half.point(j).str());
  }
  for (std::size_t j = 0; j < half.size(); ++j) {
    for (const std::size_t n : half.neighbors(j)) {
      ASSERT_LT(n, half.size());
      EXPECT_TRUE(kept.count(half.point(n).str()));
    }
  }
  // Point 0 is (a=1, b=1); of its neighbours in the full space, (a=1, b=2) is kept and
  // (a=2, b=1) is not.
  const auto near = half.neighbors(0);
  ASSERT_EQ(near.size(), 1u);
  EXPECT_EQ(half.point(near[0]).get_or("b", 0), 2);
  EXPECT_EQ(half.find(full.point(3)), std::nullopt);
  EXPECT_EQ(half.find(full.point(6)), std::optional<std::size_t>(3));
  EXPECT_THROW((void)full.subset({0, 0}), ValueError);
  EXPECT_THROW((void)full.subset({full.size()}), ValueError);
}

}  // namespace
}  // namespace ka::tuner
