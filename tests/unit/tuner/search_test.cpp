// Search strategies on synthetic spaces with a known optimum, budgets, resume, and replay
// determinism.
#include <ka/core/error.hpp>
#include <ka/tuner/search.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

namespace ka::tuner {
namespace {

// tile_m in 8 values, tile_n in 8, threads in 3; constraint: tile_m * tile_n <= 4096.
kernels::TunableSpace synthetic_space() {
  return kernels::TunableSpace(
      {{"tile_m", {8, 16, 24, 32, 48, 64, 96, 128}, ""},
       {"tile_n", {8, 16, 32, 48, 64, 96, 128, 256}, ""},
       {"threads", {1, 2, 4}, ""}},
      {{"tile_m * tile_n <= 4096",
        [](const LaunchConfig& c) { return c.get_or("tile_m", 0) * c.get_or("tile_n", 0) <= 4096; }}});
}

// A smooth bowl with its minimum at tile_m = 48, tile_n = 64, threads = 2; tile_m = 128 fails.
Evaluation cost(const LaunchConfig& c) {
  const double m = std::log2(static_cast<double>(c.get_or("tile_m", 1)));
  const double n = std::log2(static_cast<double>(c.get_or("tile_n", 1)));
  const double t = std::log2(static_cast<double>(c.get_or("threads", 1)));
  if (c.get_or("tile_m", 0) == 128) return std::nullopt;
  return 1000.0 * (1.0 + 0.3 * (m - std::log2(48.0)) * (m - std::log2(48.0)) +
                   0.2 * (n - 6.0) * (n - 6.0) + 0.5 * (t - 1.0) * (t - 1.0));
}

std::vector<Evaluation> sweep(const SearchSpace& s) {
  std::vector<Evaluation> r;
  for (std::size_t i = 0; i < s.size(); ++i) r.push_back(cost(s.point(i)));
  return r;
}

TEST(SearchSpace, RejectsInvalidPointsUpFrontAndKnowsNeighbours) {
  const SearchSpace s(synthetic_space());
  EXPECT_EQ(s.size() + s.rejected(), 8U * 8U * 3U);
  EXPECT_GT(s.rejected(), 0U);
  for (std::size_t i = 0; i < s.size(); ++i) {
    EXPECT_LE(s.point(i).get_or("tile_m", 0) * s.point(i).get_or("tile_n", 0), 4096);
    for (std::size_t n : s.neighbors(i)) {
      int diff = 0;
      for (std::size_t d = 0; d < s.dims(); ++d) diff += std::abs(s.coords(i)[d] - s.coords(n)[d]);
      EXPECT_EQ(diff, 1);
    }
  }
  LaunchConfig c;
  c.set("tile_m", 48).set("tile_n", 64).set("threads", 2);
  ASSERT_TRUE(s.find(c).has_value());
  EXPECT_EQ(s.point(*s.find(c)), c);
  EXPECT_THROW(make_strategy("genetic-ish", 1), ValueError);
}

TEST(Search, ExhaustiveFindsTheOptimumAndVisitsEveryPointOnce) {
  const SearchSpace s(synthetic_space());
  auto strategy = make_strategy("exhaustive", 0);
  const History h = search(s, *strategy, [&](std::size_t i) { return cost(s.point(i)); }, {});
  EXPECT_EQ(h.points.size(), s.size());
  EXPECT_EQ(std::set<std::size_t>(h.points.begin(), h.points.end()).size(), s.size());
  const auto best = h.best();
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(s.point(h.points[*best]).get_or("tile_m", 0), 48);
  EXPECT_EQ(s.point(h.points[*best]).get_or("tile_n", 0), 64);
  EXPECT_EQ(s.point(h.points[*best]).get_or("threads", 0), 2);
}

TEST(Search, EveryStrategyReachesTheOptimumWithinTheSpaceAndIsDeterministic) {
  const SearchSpace s(synthetic_space());
  const auto recorded = sweep(s);
  for (const std::string& name : strategy_names()) {
    SCOPED_TRACE(name);
    auto a = make_strategy(name, 42);
    auto b = make_strategy(name, 42);
    const std::size_t na = evaluations_to_reach(s, *a, recorded, 0.03);
    const std::size_t nb = evaluations_to_reach(s, *b, recorded, 0.03);
    EXPECT_EQ(na, nb) << "replay must be deterministic for a seed";
    EXPECT_LE(na, s.size());
  }
}

TEST(Search, GuidedStrategiesBeatRandomOnASmoothSpace) {
  const SearchSpace s(synthetic_space());
  const auto recorded = sweep(s);
  auto median_over_seeds = [&](const std::string& name) {
    std::vector<std::size_t> n;
    for (std::uint64_t seed = 1; seed <= 15; ++seed) {
      auto st = make_strategy(name, seed);
      n.push_back(evaluations_to_reach(s, *st, recorded, 0.03));
    }
    std::sort(n.begin(), n.end());
    return n[n.size() / 2];
  };
  const std::size_t model = median_over_seeds("model");
  const std::size_t annealing = median_over_seeds("annealing");
  const std::size_t random = median_over_seeds("random");
  RecordProperty("median_evaluations", "model " + std::to_string(model) + ", annealing " +
                                           std::to_string(annealing) + ", random " +
                                           std::to_string(random) + " of " +
                                           std::to_string(s.size()));
  // The bar: the best non-exhaustive strategy within 10% of the space (median).
  EXPECT_LE(std::min(model, annealing), s.size() / 10 + 1)
      << "model " << model << ", annealing " << annealing << ", random " << random << " of "
      << s.size();
}

TEST(Search, BudgetsStopAndResumeContinuesWithoutRepeats) {
  const SearchSpace s(synthetic_space());
  auto strategy = make_strategy("random", 7);
  int calls = 0;
  const auto eval = [&](std::size_t i) {
    ++calls;
    return cost(s.point(i));
  };
  History h = search(s, *strategy, eval, Budget{10, 1e9, {}});
  EXPECT_EQ(h.points.size(), 10U);
  // Resume (as after an interruption): a fresh strategy continues from the recorded history.
  auto again = make_strategy("random", 7);
  h = search(s, *again, eval, Budget{5, 1e9, {}}, {}, h);
  EXPECT_EQ(h.points.size(), 15U);
  EXPECT_EQ(std::set<std::size_t>(h.points.begin(), h.points.end()).size(), 15U);
  EXPECT_EQ(calls, 15);
  // A zero time budget evaluates nothing.
  auto none = make_strategy("exhaustive", 0);
  EXPECT_TRUE(search(s, *none, eval, Budget{0, 0.0, {}}).points.empty());
  // Evaluations that do not count (ka-tune's equivalent configurations) run past the budget:
  // points 0..9 in order, the odd ones free, so a budget of 3 stops after 0, 2, 4.
  auto ordered = make_strategy("exhaustive", 0);
  const History free_odd = search(s, *ordered, eval,
                                  Budget{3, 1e9, [](std::size_t i) { return i % 2 == 0; }});
  EXPECT_EQ(free_odd.points, (std::vector<std::size_t>{0, 1, 2, 3, 4}));
}

TEST(Search, TheDefaultConfigIsEvaluatedFirst) {
  const SearchSpace s(synthetic_space());
  for (const std::string& name : strategy_names()) {
    auto st = make_strategy(name, 3, std::size_t{5});
    const History h = search(s, *st, [&](std::size_t i) { return cost(s.point(i)); }, Budget{3, 1e9, {}});
    ASSERT_FALSE(h.points.empty());
    EXPECT_EQ(h.points[0], 5U) << name;
  }
}

}  // namespace
}  // namespace ka::tuner
