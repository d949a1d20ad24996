// The paired-finals rule. See Note [Paired finals] in ka/tuner/paired_finals.hpp.
#include <ka/core/error.hpp>
#include <ka/profiler/statistics.hpp>
#include <ka/tuner/paired_finals.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace ka::tuner {

namespace {

// Rounds in which candidate `a` was strictly faster than candidate `b`.
std::size_t wins(const std::vector<FinalRound>& rounds, std::size_t a, std::size_t b) {
  std::size_t n = 0;
  for (const FinalRound& r : rounds) n += r[a] < r[b] ? 1 : 0;
  return n;
}

// The default's time / `candidate`'s time in each round, ascending.
std::vector<double> sorted_ratios(const std::vector<FinalRound>& rounds, std::size_t candidate) {
  std::vector<double> ratios;
  for (const FinalRound& r : rounds) ratios.push_back(r[0] / r[candidate]);
  std::sort(ratios.begin(), ratios.end());
  return ratios;
}

// Median over rounds of the default's time / `candidate`'s time in the same round.
double gain_over_default(const std::vector<FinalRound>& rounds, std::size_t candidate) {
  if (candidate == 0) return 1.0;
  return profiler::summarize(sorted_ratios(rounds, candidate)).median;
}

}  // namespace

FinalsVerdict select_winner(const std::vector<FinalRound>& rounds, std::size_t min_wins) {
  KA_CHECK(!rounds.empty(), "select_winner: no rounds");
  const std::size_t candidates = rounds.front().size();
  KA_CHECK(candidates > 0, "select_winner: a round without candidates");
  for (const FinalRound& r : rounds) {
    KA_CHECK(r.size() == candidates, "select_winner: rounds of ", candidates, " and ", r.size(),
             " candidates");
  }
  std::vector<double> gain(candidates);
  for (std::size_t e = 0; e < candidates; ++e) gain[e] = gain_over_default(rounds, e);
  std::vector<std::size_t> order(candidates);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return gain[a] > gain[b]; });

  FinalsVerdict v;
  v.winner = order[0];
  v.separated = candidates < 2 || wins(rounds, order[0], order[1]) >= min_wins;
  if (v.winner != 0 && wins(rounds, v.winner, 0) < min_wins) {
    v.winner = 0;  // not faster than the default in enough rounds: a tie goes to the default
    v.separated = false;
  }
  v.gain = gain[v.winner];
  if (v.winner != 0) {
    const profiler::MedianInterval ci = profiler::median_ci95(sorted_ratios(rounds, v.winner));
    v.gain_low = std::isfinite(ci.low) ? ci.low : std::numeric_limits<double>::quiet_NaN();
    v.gain_high = std::isfinite(ci.high) ? ci.high : std::numeric_limits<double>::quiet_NaN();
  }
  return v;
}

double median_over_rounds(const std::vector<FinalRound>& rounds, std::size_t candidate) {
  std::vector<double> times;
  for (const FinalRound& r : rounds) times.push_back(r.at(candidate));
  return profiler::summarize(times).median;
}

}  // namespace ka::tuner
