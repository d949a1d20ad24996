#include <ka/core/error.hpp>
#include <ka/core/launch_config.hpp>

#include <gtest/gtest.h>

#include <random>

namespace ka {
namespace {

TEST(LaunchConfig, CanonicalForm) {
  LaunchConfig c;
  c.grid = {8, 4, 1};
  c.block = {128, 1, 1};
  c.set("tile_k", 64).set("threads", 2);
  EXPECT_EQ(c.str(), "grid=8x4x1 block=128x1x1 threads=2 tile_k=64");
  c.shared_mem_bytes = 4096;
  EXPECT_EQ(c.str(), "grid=8x4x1 block=128x1x1 smem=4096 threads=2 tile_k=64");
}

TEST(LaunchConfig, ParseIsOrderIndependentAndRoundTrips) {
  const auto a = LaunchConfig::parse("tile_k=64 block=128x1x1   grid=8x4x1 threads=2");
  const auto b = LaunchConfig::parse("grid=8x4x1 block=128x1x1 threads=2 tile_k=64");
  EXPECT_EQ(a, b);
  EXPECT_EQ(LaunchConfig::parse(a.str()), a);
  EXPECT_EQ(a.get("tile_k"), 64);
  EXPECT_EQ(a.get("missing"), std::nullopt);
  EXPECT_EQ(a.get_or("missing", 7), 7);
}

TEST(LaunchConfig, RandomRoundTrips) {
  std::mt19937_64 rng(42);
  const char* names[] = {"tile_m", "tile_n", "tile_k", "threads", "unroll", "vec", "_x1"};
  for (int trial = 0; trial < 500; ++trial) {
    LaunchConfig c;
    c.grid = {1 + static_cast<std::int64_t>(rng() % 1000), 1 + static_cast<std::int64_t>(rng() % 7), 1};
    c.block = {1 + static_cast<std::int64_t>(rng() % 1024), 1, 1 + static_cast<std::int64_t>(rng() % 3)};
    c.shared_mem_bytes = static_cast<std::int64_t>(rng() % 3) * 1024;
    for (const char* n : names) {
      if (rng() % 2 == 0) c.set(n, static_cast<std::int64_t>(rng() % 100000) - 50000);
    }
    const auto back = LaunchConfig::parse(c.str());
    ASSERT_EQ(back, c) << c.str();
    ASSERT_EQ(back.str(), c.str());
  }
}

TEST(LaunchConfig, SetReplacesAndKeepsOrder) {
  LaunchConfig c;
  c.set("b", 1).set("a", 2).set("b", 3);
  ASSERT_EQ(c.params().size(), 2U);
  EXPECT_EQ(c.params()[0].first, "a");
  EXPECT_EQ(c.get("b"), 3);
}

TEST(LaunchConfig, RejectsMalformedText) {
  for (const char* bad : {"grid=8x4", "grid=0x1x1", "block=axbxc", "grid=1x1x1 grid=1x1x1",
                          "tile=1 tile=2", "tile", "=3", "tile=", "tile=1.5", "Tile=3",
                          "smem=-1", "9abc=1"}) {
    EXPECT_THROW(LaunchConfig::parse(bad), ValueError) << bad;
  }
  LaunchConfig c;
  EXPECT_THROW(c.set("grid", 1), ValueError);
  EXPECT_THROW(c.set("has space", 1), ValueError);
}

TEST(LaunchConfig, ErrorNamesTheToken) {
  try {
    LaunchConfig::parse("grid=1x1x1 block=4xQx1");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("block=4xQx1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ka
