#include <ka/core/ceil_div.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <type_traits>

namespace {

// Constant expressions: the CUDA kernels size their per-thread arrays with it.
static_assert(ka::ceil_div(0, 4) == 0);
static_assert(ka::ceil_div(1, 4) == 1);
static_assert(ka::ceil_div(8, 4) == 2);
static_assert(ka::ceil_div(9, 4) == 3);
static_assert(std::is_same_v<decltype(ka::ceil_div(std::int64_t{1}, 2)), std::int64_t>);
static_assert(std::is_same_v<decltype(ka::ceil_div(1, 2)), int>);
static_assert(ka::round_up(0, 6) == 0);
static_assert(ka::round_up(6, 6) == 6);
static_assert(ka::round_up(7, 6) == 12);
static_assert(std::is_same_v<decltype(ka::round_up(std::int64_t{7}, 6)), std::int64_t>);

TEST(CeilDiv, CountsTheBlocksThatCoverACount) {
  EXPECT_EQ(ka::ceil_div(std::int64_t{4096} * 4096, 65536), 256);
  EXPECT_EQ(ka::ceil_div(std::int64_t{4096} * 4096 + 1, 65536), 257);
  // Computed in 64 bits when either side is: no int overflow on large counts.
  EXPECT_EQ(ka::ceil_div(std::int64_t{1} << 40, 3), (std::int64_t{1} << 40) / 3 + 1);
}

TEST(RoundUp, GivesTheLeastMultipleAtLeastTheCount) {
  EXPECT_EQ(ka::round_up(std::int64_t{4096} * 4096 + 1, 65536), std::int64_t{257} * 65536);
  EXPECT_EQ(ka::round_up(std::int64_t{1} << 40, 3), ((std::int64_t{1} << 40) / 3 + 1) * 3);
}

}  // namespace
