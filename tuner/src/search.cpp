#include <ka/core/error.hpp>
#include <ka/tuner/search.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

namespace ka::tuner {

SearchSpace::SearchSpace(const kernels::TunableSpace& space) {
  const auto& params = space.params();
  for (const auto& p : params) radix_.push_back(static_cast<std::int32_t>(p.candidates.size()));
  const std::uint64_t total = space.cross_product_size();
  KA_CHECK(total <= (std::uint64_t{1} << 24), "tunable space of ", total,
           " points is too large to enumerate");
  index_of_code_.assign(static_cast<std::size_t>(total), -1);
  std::vector<std::int32_t> c(params.size(), 0);
  for (std::uint64_t code = 0; code < total; ++code) {
    LaunchConfig point;
    for (std::size_t i = 0; i < params.size(); ++i) {
      point.set(params[i].name, params[i].candidates[static_cast<std::size_t>(c[i])]);
    }
    if (space.check(point)) {
      index_of_code_[static_cast<std::size_t>(code)] = static_cast<std::int64_t>(points_.size());
      points_.push_back(std::move(point));
      coords_.push_back(c);
    } else {
      ++rejected_;
    }
    // Odometer, last parameter fastest (the order of TunableSpace::enumerate).
    for (std::size_t i = params.size(); i > 0; --i) {
      if (++c[i - 1] < radix_[i - 1]) break;
      c[i - 1] = 0;
    }
  }
}

SearchSpace SearchSpace::subset(const std::vector<std::size_t>& keep) const {
  SearchSpace out;
  out.radix_ = radix_;
  out.rejected_ = rejected_;
  out.index_of_code_.assign(index_of_code_.size(), -1);
  std::vector<std::int64_t> kept_as(points_.size(), -1);
  for (const std::size_t i : keep) {
    KA_CHECK(i < points_.size() && kept_as[i] < 0,
             "subset of a search space: point ", i, " is out of range or repeated");
    kept_as[i] = static_cast<std::int64_t>(out.points_.size());
    out.points_.push_back(points_[i]);
    out.coords_.push_back(coords_[i]);
  }
  for (std::size_t code = 0; code < index_of_code_.size(); ++code) {
    const std::int64_t old = index_of_code_[code];
    if (old >= 0) out.index_of_code_[code] = kept_as[static_cast<std::size_t>(old)];
  }
  return out;
}

std::optional<std::size_t> SearchSpace::find(const LaunchConfig& config) const {
  for (std::size_t i = 0; i < points_.size(); ++i) {
    bool same = true;
    for (const auto& [name, value] : points_[i].params()) {
      same = same && config.get(name) == value;
    }
    if (same) return i;
  }
  return std::nullopt;
}

std::vector<std::size_t> SearchSpace::neighbors(std::size_t i) const {
  std::vector<std::size_t> out;
  const auto& c = coords_.at(i);
  for (std::size_t d = 0; d < c.size(); ++d) {
    for (const int step : {-1, 1}) {
      const std::int32_t v = c[d] + step;
      if (v < 0 || v >= radix_[d]) continue;
      std::uint64_t code = 0;
      for (std::size_t k = 0; k < c.size(); ++k) {
        code = code * static_cast<std::uint64_t>(radix_[k]) +
               static_cast<std::uint64_t>(k == d ? v : c[k]);
      }
      const std::int64_t idx = index_of_code_[static_cast<std::size_t>(code)];
      if (idx >= 0) out.push_back(static_cast<std::size_t>(idx));
    }
  }
  return out;
}

bool History::evaluated(std::size_t point) const {
  if (indexed_ > points.size()) {  // points were removed: start over
    seen_.clear();
    indexed_ = 0;
  }
  for (; indexed_ < points.size(); ++indexed_) {
    const std::size_t p = points[indexed_];
    if (p >= seen_.size()) seen_.resize(std::max(p + 1, 2 * seen_.size()), false);
    seen_[p] = true;
  }
  return point < seen_.size() && seen_[point];
}

std::optional<std::size_t> History::best() const {
  std::optional<std::size_t> b;
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (results[i] && (!b || *results[i] < *results[*b])) b = i;
  }
  return b;
}

namespace {

// A deterministic uniform draw in [0, n) (std distributions differ between libraries).
std::size_t draw(std::mt19937_64& rng, std::size_t n) { return static_cast<std::size_t>(rng() % n); }
double draw_unit(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
}

// Strategies share "evaluate the default first, then never propose a point twice".
class StrategyBase : public Strategy {
 public:
  explicit StrategyBase(std::optional<std::size_t> first) : first_(first) {}
  std::optional<std::size_t> next(const SearchSpace& space, const History& h) final {
    if (first_ && *first_ < space.size() && !h.evaluated(*first_)) return first_;
    if (h.points.size() >= space.size()) return std::nullopt;
    return propose(space, h);
  }

 protected:
  virtual std::optional<std::size_t> propose(const SearchSpace& space, const History& h) = 0;
  // The first unevaluated point at or after `from` (wrapping), or nullopt.
  static std::optional<std::size_t> unevaluated_from(const SearchSpace& space, const History& h,
                                                     std::size_t from) {
    for (std::size_t k = 0; k < space.size(); ++k) {
      const std::size_t i = (from + k) % space.size();
      if (!h.evaluated(i)) return i;
    }
    return std::nullopt;
  }
  std::optional<std::size_t> first_;
};

class Exhaustive final : public StrategyBase {
 public:
  using StrategyBase::StrategyBase;
  [[nodiscard]] std::string name() const override { return "exhaustive"; }

 private:
  std::optional<std::size_t> propose(const SearchSpace& space, const History& h) override {
    return unevaluated_from(space, h, 0);
  }
};

class RandomSearch final : public StrategyBase {
 public:
  RandomSearch(std::uint64_t seed, std::optional<std::size_t> first)
      : StrategyBase(first), rng_(seed) {}
  [[nodiscard]] std::string name() const override { return "random"; }

 private:
  std::optional<std::size_t> propose(const SearchSpace& space, const History& h) override {
    return unevaluated_from(space, h, draw(rng_, space.size()));
  }
  std::mt19937_64 rng_;
};

// Simulated annealing on log-time: from the current point, try an unevaluated neighbour
// (a random unevaluated point when every neighbour is known); accept a worse result with
// probability exp(-Δ/T), T cooling geometrically. Failed points are never accepted.
class Annealing final : public StrategyBase {
 public:
  Annealing(std::uint64_t seed, std::optional<std::size_t> first)
      : StrategyBase(first), rng_(seed) {}
  [[nodiscard]] std::string name() const override { return "annealing"; }

 private:
  std::optional<std::size_t> propose(const SearchSpace& space, const History& h) override {
    // Decide on the last proposal.
    if (!h.points.empty()) {
      const std::size_t last = h.points.size() - 1;
      const Evaluation& r = h.results[last];
      if (!current_) {
        if (r) current_ = last;
      } else if (r) {
        const double delta = std::log(*r) - std::log(*h.results[*current_]);
        if (delta <= 0.0 || draw_unit(rng_) < std::exp(-delta / temperature_)) current_ = last;
      }
      temperature_ = std::max(temperature_ * 0.85, 1e-3);
    }
    if (!current_) return unevaluated_from(space, h, draw(rng_, space.size()));
    // Restart from the best point now and then so a bad acceptance does not strand us.
    if (draw_unit(rng_) < 0.1) current_ = h.best();
    std::vector<std::size_t> options;
    for (std::size_t n : space.neighbors(h.points[*current_])) {
      if (!h.evaluated(n)) options.push_back(n);
    }
    if (options.empty()) return unevaluated_from(space, h, draw(rng_, space.size()));
    return options[draw(rng_, options.size())];
  }
  std::mt19937_64 rng_;
  std::optional<std::size_t> current_;  // index into history
  double temperature_ = 0.3;
};

// Note [Model-guided search]
// A cost model learnt online: every point is a vector of normalised coordinates (candidate
// index / (candidates - 1)); the predicted log-time of an unevaluated point is the inverse-
// distance-weighted mean over its k nearest evaluated points (failed ones count as 4x the worst
// time seen, so the model learns to avoid regions that fail). After a small seed design
// (random points), the strategy takes the point with the lowest prediction, and one draw in
// five is random so the model keeps learning about unexplored regions.
// Every point keeps its k nearest evaluated points (distance and history index), updated as
// the history grows, so a proposal costs O(space x dims) rather than O(space x history):
// a replay of a 10^4-point space runs in seconds, not hours.
class ModelGuided final : public StrategyBase {
 public:
  ModelGuided(std::uint64_t seed, std::optional<std::size_t> first)
      : StrategyBase(first), rng_(seed) {}
  [[nodiscard]] std::string name() const override { return "model"; }

 private:
  static constexpr std::size_t kNeighbours = 4;
  struct Near {
    double distance2;
    std::size_t entry;  // index into the history
  };

  std::optional<std::size_t> propose(const SearchSpace& space, const History& h) override {
    learn(space, h);
    const std::size_t seed_points = std::min<std::size_t>(6, space.size());
    if (h.points.size() < seed_points || draw_unit(rng_) < 0.2) {
      return unevaluated_from(space, h, draw(rng_, space.size()));
    }
    double worst = 0.0;
    for (const auto& r : h.results) {
      if (r) worst = std::max(worst, std::log(*r));
    }
    const auto value = [&](std::size_t entry) {
      return h.results[entry] ? std::log(*h.results[entry]) : worst + std::log(4.0);
    };
    std::optional<std::size_t> best;
    double best_prediction = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < space.size(); ++i) {
      if (h.evaluated(i)) continue;
      double num = 0.0;
      double den = 0.0;
      for (const Near& n : near_[i]) {
        const double w = 1.0 / (n.distance2 + 1e-6);
        num += w * value(n.entry);
        den += w;
      }
      const double p = num / den;
      if (p < best_prediction) {
        best_prediction = p;
        best = i;
      }
    }
    return best;
  }

  // Folds the history entries not seen yet into every point's nearest list.
  void learn(const SearchSpace& space, const History& h) {
    const std::size_t dims = space.dims();
    if (learnt_ > h.points.size() || near_.size() != space.size()) {  // a new history
      near_.assign(space.size(), {});
      learnt_ = 0;
      x_.assign(space.size() * dims, 0.0);
      for (std::size_t i = 0; i < space.size(); ++i) {
        const auto& c = space.coords(i);
        for (std::size_t d = 0; d < dims; ++d) {
          const std::int32_t r = space.radix()[d];
          x_[i * dims + d] = r > 1 ? static_cast<double>(c[d]) / static_cast<double>(r - 1) : 0.0;
        }
      }
    }
    for (; learnt_ < h.points.size(); ++learnt_) {
      const double* p = &x_[h.points[learnt_] * dims];
      for (std::size_t i = 0; i < space.size(); ++i) {
        const double* x = &x_[i * dims];
        double d2 = 0.0;
        for (std::size_t k = 0; k < dims; ++k) d2 += (x[k] - p[k]) * (x[k] - p[k]);
        std::vector<Near>& list = near_[i];
        // Ties keep the earlier entry, as a stable sort of all entries would.
        if (list.size() == kNeighbours && d2 >= list.back().distance2) continue;
        const auto at = std::upper_bound(list.begin(), list.end(), d2,
                                         [](double v, const Near& n) { return v < n.distance2; });
        list.insert(at, Near{d2, learnt_});
        if (list.size() > kNeighbours) list.pop_back();
      }
    }
  }

  std::mt19937_64 rng_;
  std::vector<double> x_;                // normalised coordinates, dims() per point
  std::vector<std::vector<Near>> near_;  // per point: its nearest evaluated points, closest first
  std::size_t learnt_ = 0;               // history entries folded into near_
};

}  // namespace

std::vector<std::string> strategy_names() { return {"exhaustive", "random", "annealing", "model"}; }

std::unique_ptr<Strategy> make_strategy(const std::string& name, std::uint64_t seed,
                                        std::optional<std::size_t> first) {
  if (name == "exhaustive") return std::make_unique<Exhaustive>(first);
  if (name == "random") return std::make_unique<RandomSearch>(seed, first);
  if (name == "annealing") return std::make_unique<Annealing>(seed, first);
  if (name == "model") return std::make_unique<ModelGuided>(seed, first);
  KA_THROW(ValueError, "unknown strategy '", name, "' (known: exhaustive, random, annealing, model)");
}

History search(const SearchSpace& space, Strategy& strategy,
               const std::function<Evaluation(std::size_t)>& evaluate, const Budget& budget,
               const std::function<void(std::size_t, const Evaluation&, const History&)>& on_result,
               History resume_from) {
  History h = std::move(resume_from);
  const auto start = std::chrono::steady_clock::now();
  std::size_t evaluations = 0;
  while (budget.max_evaluations == 0 || evaluations < budget.max_evaluations) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed >= budget.max_seconds) break;
    const std::optional<std::size_t> p = strategy.next(space, h);
    if (!p) break;
    KA_ASSERT(*p < space.size() && !h.evaluated(*p), strategy.name(), " proposed point ", *p,
              " twice or out of range");
    const Evaluation r = evaluate(*p);
    h.points.push_back(*p);
    h.results.push_back(r);
    if (!budget.counts || budget.counts(*p)) ++evaluations;
    if (on_result) on_result(*p, r, h);
    if (budget.done && budget.done(h)) break;
  }
  return h;
}

std::size_t evaluations_to_reach(const SearchSpace& space, Strategy& strategy,
                                 const std::vector<Evaluation>& recorded, double tolerance) {
  KA_CHECK(recorded.size() == space.size(), "replay: recorded sweep has ", recorded.size(),
           " points, the space ", space.size());
  double best = std::numeric_limits<double>::infinity();
  for (const auto& r : recorded) {
    if (r) best = std::min(best, *r);
  }
  if (!std::isfinite(best)) return space.size() + 1;
  const double goal = best * (1.0 + tolerance);
  // The search stops at the first point within the goal (the rest would not change the
  // answer, and a model strategy's proposals grow with the history).
  std::size_t needed = space.size() + 1;
  Budget budget{space.size(), 1e300};
  budget.done = [&](const History& h) {
    const Evaluation& r = h.results.back();
    if (!r || *r > goal) return false;
    needed = h.points.size();
    return true;
  };
  search(space, strategy, [&](std::size_t i) { return recorded[i]; }, budget);
  return needed;
}

}  // namespace ka::tuner
