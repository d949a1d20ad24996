// The paired-finals rule on hand-made rounds (Note [Paired finals]): candidate 0 is the default,
// a winner needs kFinalWins of kFinalRounds rounds against it, equal times are no win.
#include <ka/core/error.hpp>
#include <ka/tuner/paired_finals.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace ka::tuner {
namespace {

// kFinalRounds rounds, round r timing candidate e at times[e][r].
std::vector<FinalRound> rounds_of(const std::vector<std::vector<double>>& times) {
  std::vector<FinalRound> rounds(kFinalRounds);
  for (std::size_t r = 0; r < kFinalRounds; ++r) {
    for (const auto& candidate : times) rounds[r].push_back(candidate.at(r));
  }
  return rounds;
}

std::vector<double> constant(double ns) { return std::vector<double>(kFinalRounds, ns); }

// Whether select_winner(rounds, min_wins) decides {winner, gain, separated}, the gain equal up
// to rounding.
testing::AssertionResult verdict_is(const std::vector<FinalRound>& rounds, std::size_t winner,
                                    double gain, bool separated,
                                    std::size_t min_wins = kFinalWins) {
  const FinalsVerdict v = select_winner(rounds, min_wins);
  if (v.winner == winner && std::abs(v.gain - gain) <= 1e-12 * gain && v.separated == separated) {
    return testing::AssertionSuccess();
  }
  return testing::AssertionFailure()
         << "got winner " << v.winner << ", gain " << v.gain << ", separated " << v.separated;
}

TEST(PairedFinals, AClearWinReplacesTheDefaultAndIsSeparated) {
  EXPECT_TRUE(
      verdict_is(rounds_of({constant(100), constant(80), constant(90)}), 1, 100.0 / 80, true));
}

TEST(PairedFinals, TheGainCarriesTheIntervalOfItsMedian) {
  // Ratios 100/80 .. 100/87 over the 8 rounds: the interval brackets their median and lies
  // within their range.
  const FinalsVerdict v =
      select_winner(rounds_of({constant(100), {80, 81, 82, 83, 84, 85, 86, 87}}));
  ASSERT_EQ(v.winner, 1U);
  EXPECT_LT(v.gain_low, v.gain);
  EXPECT_GT(v.gain_high, v.gain);
  EXPECT_GE(v.gain_low, 100.0 / 87);
  EXPECT_LE(v.gain_high, 100.0 / 80);
  // The default kept: gain 1 exactly.
  const FinalsVerdict tie = select_winner(rounds_of({constant(100), constant(100)}));
  EXPECT_EQ(tie.winner, 0U);
  EXPECT_EQ(tie.gain_low, 1.0);
  EXPECT_EQ(tie.gain_high, 1.0);
}

TEST(PairedFinals, SevenWinsOfEightAreEnough) {
  EXPECT_TRUE(verdict_is(rounds_of({constant(100), {95, 95, 95, 95, 95, 95, 95, 105}}), 1,
                         100.0 / 95, true));
}

TEST(PairedFinals, SixWinsOfEightAreATieAndKeepTheDefault) {
  // Its median gain is above 1, but it beat the default in too few rounds.
  EXPECT_TRUE(
      verdict_is(rounds_of({constant(100), {95, 95, 95, 95, 95, 95, 105, 105}}), 0, 1.0, false));
}

TEST(PairedFinals, InterferenceInHalfTheRoundsIsNoGain) {
  // A burst slows the default in rounds 4-7: compared by medians alone (115 vs 110) the
  // candidate would look faster; paired, it won only the burst's rounds.
  EXPECT_TRUE(verdict_is(rounds_of({{100, 100, 100, 100, 130, 130, 130, 130}, constant(110)}), 0,
                         1.0, false));
}

TEST(PairedFinals, EqualTimesAreNoWin) {
  // Equal gains: the earlier candidate, the default; not separated from the other.
  EXPECT_TRUE(verdict_is(rounds_of({constant(100), constant(100)}), 0, 1.0, false));
}

TEST(PairedFinals, EqualGainsGoToTheEarlierCandidateUnseparated) {
  EXPECT_TRUE(
      verdict_is(rounds_of({constant(100), constant(90), constant(90)}), 1, 100.0 / 90, false));
}

TEST(PairedFinals, AWinnerCloseToTheRunnerUpIsNotSeparated) {
  // Both beat the default every round; the first has the higher median gain but beat the
  // second in only the even rounds.
  EXPECT_TRUE(verdict_is(rounds_of({constant(100), {80, 82, 80, 82, 80, 82, 80, 82}, constant(81)}),
                         1, 0.5 * (100.0 / 82 + 100.0 / 80), false));
}

TEST(PairedFinals, TheDefaultAloneWinsSeparated) {
  EXPECT_TRUE(verdict_is(rounds_of({constant(100)}), 0, 1.0, true));
}

TEST(PairedFinals, ASingleRoundCannotReachSevenWins) {
  const std::vector<FinalRound> one = {{100, 50}};
  EXPECT_TRUE(verdict_is(one, 0, 1.0, false));
  EXPECT_TRUE(verdict_is(one, 1, 2.0, true, 1));
}

TEST(PairedFinals, MalformedRoundsAreValueErrors) {
  EXPECT_THROW(select_winner({}), ValueError);
  EXPECT_THROW(select_winner({FinalRound{}}), ValueError);
  EXPECT_THROW(select_winner({{100, 90}, {100}}), ValueError);
}

TEST(PairedFinals, MedianOverRounds) {
  const std::vector<FinalRound> rounds = {{1, 10}, {3, 30}, {2, 20}, {4, 40}};
  EXPECT_DOUBLE_EQ(median_over_rounds(rounds, 0), 2.5);
  EXPECT_DOUBLE_EQ(median_over_rounds(rounds, 1), 25.0);
}

}  // namespace
}  // namespace ka::tuner
