// The paired finals: how ka-tune picks a shape's winner among the default configuration and
// the sweep's fastest few, timed together. See Note [Paired finals].
#pragma once

#include <cstddef>
#include <vector>

namespace ka::tuner {

// Note [Paired finals]
// On a shared machine a burst of interference lasts longer than one configuration's timing,
// so timing the finalists one after the other lets a burst during the default's turn pass for
// a gain. The finalists and the default are therefore timed in kFinalRounds rounds, each
// timing every one of them once, starting one further along each round; within a round all
// candidates see about the same machine. A candidate's gain is the median over rounds of the
// default's time / its time in the same round; the winner has the highest gain (the earlier
// candidate on equal gains, so the default wins those). It replaces the default only if it
// was faster than the default in at least kFinalWins of the rounds (a one-sided sign test:
// 7 of 8 by chance has p = 9/256 < 0.05); otherwise the default stays, a tie. The winner is
// "separated" when it was faster than the runner-up in as many rounds.

/// Rounds ka-tune times in its finals, and the rounds a candidate must win (Note [Paired finals]).
constexpr std::size_t kFinalRounds = 8;
constexpr std::size_t kFinalWins = 7;

/// One round of the finals: each candidate's time in ns, all timed in that round. Candidate 0
/// is the default configuration.
using FinalRound = std::vector<double>;

/// What the finals decided.
struct FinalsVerdict {
  std::size_t winner = 0;  ///< Index of the chosen candidate; 0 keeps the default.
  double gain = 1.0;       ///< Median over rounds of the default's time / the winner's (1 for it).
  /// 95% interval of that median (profiler::median_ci95 over the rounds' ratios); NaN with
  /// fewer than 6 rounds, [1, 1] when the default is kept.
  double gain_low = 1.0;
  double gain_high = 1.0;
  /// The winner was faster than the runner-up in at least `min_wins` rounds (true when it had
  /// none); false when the default was kept on a tie.
  bool separated = true;
};

/// Applies Note [Paired finals] to `rounds` with `min_wins` as the wins needed. Deterministic;
/// times are compared strictly (an equal time is no win). Throws ka::ValueError when `rounds` is
/// empty, a round is empty or the rounds have different numbers of candidates.
FinalsVerdict select_winner(const std::vector<FinalRound>& rounds,
                            std::size_t min_wins = kFinalWins);

/// Median over `rounds` of `candidate`'s time, ns.
double median_over_rounds(const std::vector<FinalRound>& rounds, std::size_t candidate);

}  // namespace ka::tuner
