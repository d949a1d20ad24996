// Search over a kernel's tunable space: the space as a grid of candidate indices, strategies
// behind one interface, budgets, and replay of recorded sweeps.
#pragma once

#include <ka/core/launch_config.hpp>
#include <ka/kernels/tunable_space.hpp>

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ka::tuner {

/// The valid points of a TunableSpace (constraints applied up front, so invalid points are
/// never run), each also as coordinates: per parameter, the index of its candidate value.
/// Neighbours differ by one step in one coordinate, which is what local strategies move along.
///
///   SearchSpace space(descriptor.space);
///   LaunchConfig c = space.point(7);                 // params only
///   auto near = space.neighbors(7);                  // valid points one step away
class SearchSpace {
 public:
  explicit SearchSpace(const kernels::TunableSpace& space);

  [[nodiscard]] std::size_t size() const noexcept { return points_.size(); }
  [[nodiscard]] const LaunchConfig& point(std::size_t i) const { return points_.at(i); }
  [[nodiscard]] const std::vector<std::int32_t>& coords(std::size_t i) const { return coords_.at(i); }
  [[nodiscard]] std::size_t dims() const noexcept { return radix_.size(); }
  /// Candidates per parameter.
  [[nodiscard]] const std::vector<std::int32_t>& radix() const noexcept { return radix_; }
  /// The index of the point equal to `config` on every parameter, or nullopt.
  [[nodiscard]] std::optional<std::size_t> find(const LaunchConfig& config) const;
  /// Valid points one candidate step away in one parameter.
  [[nodiscard]] std::vector<std::size_t> neighbors(std::size_t i) const;
  /// Points rejected by constraints when the space was built.
  [[nodiscard]] std::uint64_t rejected() const noexcept { return rejected_; }
  /// The space of the points `keep` (indices into this space, ascending) only, in this order:
  /// neighbours are those of the kept points. A slice of the space (Note [Space slices]).
  [[nodiscard]] SearchSpace subset(const std::vector<std::size_t>& keep) const;

 private:
  SearchSpace() = default;
  std::vector<LaunchConfig> points_;
  std::vector<std::vector<std::int32_t>> coords_;
  std::vector<std::int32_t> radix_;
  std::vector<std::int64_t> index_of_code_;  // mixed-radix code → point index, -1 if invalid
  std::uint64_t rejected_ = 0;
};

/// What one evaluation gave: the time (ns, lower is better) or nullopt when the
/// configuration failed (a disposition other than ok).
using Evaluation = std::optional<double>;

/// Past evaluations, in order, as a strategy sees them.
struct History {
  std::vector<std::size_t> points;
  std::vector<Evaluation> results;
  /// Whether `point` is in `points`: amortised O(1) while points only grow at the back (an
  /// index over the points appended since the last call; rebuilt when they shrank).
  [[nodiscard]] bool evaluated(std::size_t point) const;
  /// Index into points/results of the best ok result; nullopt before any.
  [[nodiscard]] std::optional<std::size_t> best() const;

 private:
  mutable std::vector<bool> seen_;
  mutable std::size_t indexed_ = 0;  // points[0, indexed_) are in seen_
};

/// A search strategy: proposes the next point to evaluate given the history; nullopt when it
/// has nothing more to propose. Deterministic for a given seed and history.
class Strategy {
 public:
  virtual ~Strategy() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  virtual std::optional<std::size_t> next(const SearchSpace& space, const History& history) = 0;
};

/// "exhaustive" (every point, in order), "random" (without replacement), "annealing"
/// (simulated annealing over neighbours), "model" (a cost model learnt from the points
/// measured so far orders the rest; see Note [Model-guided search]), "default-first"
/// variants are not separate: every strategy evaluates `first` (the default config) first
/// when given. Throws ka::ValueError for an unknown name, listing the known ones.
std::unique_ptr<Strategy> make_strategy(const std::string& name, std::uint64_t seed,
                                        std::optional<std::size_t> first = std::nullopt);
/// The names make_strategy accepts.
std::vector<std::string> strategy_names();

/// Limits of one search. 0 / infinity mean none.
struct Budget {
  std::size_t max_evaluations = 0;
  double max_seconds = std::numeric_limits<double>::infinity();
  /// Asked after each evaluation: whether it counts against max_evaluations (empty: all do).
  /// ka-tune's evaluations of a configuration equivalent to one measured do not.
  std::function<bool(std::size_t point)> counts = {};
  /// Asked after each evaluation, with the history including it: true ends the search there
  /// (replay: a point within the goal was found). Empty: never.
  std::function<bool(const History& history)> done = {};
};

/// Runs `strategy` until it stops or the budget ends; `evaluate` measures a point (and may
/// throw to abort the whole search, e.g. on an interrupt). `on_result` (optional) sees each
/// evaluation as it lands (progress bars, database writes).
History search(const SearchSpace& space, Strategy& strategy,
               const std::function<Evaluation(std::size_t)>& evaluate, const Budget& budget,
               const std::function<void(std::size_t, const Evaluation&, const History&)>&
                   on_result = {},
               History resume_from = {});

/// Replay: how many evaluations `strategy` needs before it has seen a point within
/// `tolerance` (0.03 = 3%) of the best of `recorded` (a full sweep: time per point, nullopt
/// for failed points). Returns recorded.size() + 1 when it never gets there.
std::size_t evaluations_to_reach(const SearchSpace& space, Strategy& strategy,
                                 const std::vector<Evaluation>& recorded, double tolerance);

}  // namespace ka::tuner
