// The micro-kernels of two A slivers (Note [Micro-tiles of two slivers]) against the
// one-sliver kernels they stand in for: the same products, bit for bit, for every width of
// every ISA this CPU runs, adding onto C and setting C from a start matrix, a broadcast row
// or zeros. White-box: it calls the internal entry points directly.
#include "gemm_internal.hpp"
#include "isa_paths.hpp"

#include <ka/core/fingerprint.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace ka::kernels::detail {
namespace {

std::vector<float> random_floats(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0F, 1.0F);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

MicroKernelInfo kernel_of(const std::string& isa, int width) {
  if (isa == "avx512") return micro_kernel_avx512(width);
  if (isa == "avx2") return micro_kernel_avx2(width);
  return micro_kernel_generic(width);
}

// One kernel of two slivers against two calls of the one-sliver kernel, on C rows ldc apart
// with columns past the tile that neither may touch.
void expect_pair_equals_two_tiles(const MicroKernelInfo& mk, std::int64_t kc, std::mt19937& rng) {
  const std::int64_t nr = mk.cols;
  const std::int64_t ldc = nr + 5;
  const std::int64_t rows = 2 * kMicroRows;
  const std::string what = std::string(mk.isa) + " nr=" + std::to_string(nr) +
                           " kc=" + std::to_string(kc);
  const std::vector<float> a = random_floats(static_cast<std::size_t>(rows * kc + kPackSlack), rng);
  const std::vector<float> b = random_floats(static_cast<std::size_t>(nr * kc), rng);
  const std::vector<float> c = random_floats(static_cast<std::size_t>(rows * ldc), rng);
  const float* second_a = a.data() + kMicroRows * kc;
  const std::int64_t second_c = kMicroRows * ldc;

  std::vector<float> pair = c;
  std::vector<float> single = c;
  mk.fn_pair(kc, a.data(), b.data(), pair.data(), ldc, 0.75F);
  mk.fn(kc, a.data(), b.data(), single.data(), ldc, 0.75F);
  mk.fn(kc, second_a, b.data(), single.data() + second_c, ldc, 0.75F);
  EXPECT_EQ(pair, single) << what << " adding onto C";

  ASSERT_NE(mk.fn_set_pair, nullptr) << what;
  const std::vector<float> start = random_floats(static_cast<std::size_t>(rows * nr), rng);
  // A start matrix (rows nr apart), one row for every row (ld 0) and zeros (null).
  const struct {
    const float* c0;
    std::int64_t ld;
    std::int64_t second;  ///< the second tile's start
    const char* name;
  } starts[] = {{start.data(), nr, kMicroRows * nr, "a start matrix"},
                {start.data(), 0, 0, "a broadcast row"},
                {nullptr, 0, 0, "zeros"}};
  for (const auto& s : starts) {
    pair = c;
    single = c;
    mk.fn_set_pair(kc, a.data(), b.data(), pair.data(), ldc, 0.75F, s.c0, s.ld);
    mk.fn_set(kc, a.data(), b.data(), single.data(), ldc, 0.75F, s.c0, s.ld);
    mk.fn_set(kc, second_a, b.data(), single.data() + second_c, ldc, 0.75F,
              s.c0 == nullptr ? nullptr : s.c0 + s.second, s.ld);
    EXPECT_EQ(pair, single) << what << " setting C from " << s.name;
  }
}

TEST(MicroTilesOfTwoSlivers, EqualTwoTilesOfOneOnEveryIsaAndWidth) {
  std::mt19937 rng(5);
  int checked = 0;
  for (const std::string& isa : test::runnable_isas()) {
    for (const int width : {16, 32, 48}) {
      const MicroKernelInfo mk = kernel_of(isa, width);
      if (mk.fn == nullptr) continue;
      // A tile of two slivers must fit the registers: AVX-512 up to 32 columns (24
      // accumulators), none on AVX2 (16 registers) or the portable kernel.
      const bool expected = isa == "avx512" && width <= 32;
      ASSERT_EQ(mk.fn_pair != nullptr, expected) << isa << " nr=" << width;
      if (mk.fn_pair == nullptr) continue;
      for (const std::int64_t kc : {1, 7, 256}) expect_pair_equals_two_tiles(mk, kc, rng);
      ++checked;
    }
  }
  if (cpu_isa_level() == "avx512") {
    EXPECT_EQ(checked, 2);
  }
}

}  // namespace
}  // namespace ka::kernels::detail
