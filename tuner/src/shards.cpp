#include <ka/core/error.hpp>
#include <ka/core/text.hpp>
#include <ka/tuner/shards.hpp>

#include "shape_trials.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <set>

// Note [Shard plan]
// A shard runs a subset of the command's shapes; the subsets are disjoint and cover them, so
// shard databases merged together hold exactly what one unsharded run would (ka-db merge).
//  - With at least as many distinct shapes as shards, whole shapes are dealt out: heaviest
//    first (estimated_work(), ties by position), each to the shard with the least work so far
//    (ties to the lowest shard): the longest-processing-time rule, within 4/3 of the best
//    balance. A shard then runs its shapes in the command's order.
//  - With fewer shapes than shards, shapes are sliced (Note [Space slices]): each shape gets
//    one slice, and the rest go one at a time to the shape with the most work per slice; then
//    there are exactly N items, shard k running item k (shapes in order, their slices in order).
// The estimate only balances: a wrong one makes a campaign slower, never different.
//
// Note [Space slices]
// Slice j of p of a shape's space (its points the kernel can run there, Note [Tuning a
// shape] 0) is the configurations whose equivalence class (the kernel's canonical form at
// that shape, Note [Tuning a shape] 2; one whose completion throws is a class of its own) is
// the j-th modulo p, classes numbered by their first point in the space's order. Whole
// classes stay together, so a slice never measures a configuration that runs as one another
// slice measured: under --strategy exhaustive the slices' trials together are exactly the
// unsharded sweep's. Dealing classes round-robin spreads every tunable's values over all
// slices, so slices take similar time. Each slice times its own finalists against the
// default and stores its winner; ka-db merge keeps the lowest median of a device's slice
// winners (Note [Merge rules]). Evaluation and time budgets are divided between a shape's
// slices, so the parts together spend what the unsharded run would.

namespace ka::tuner {

ShardId parse_shard(const std::string& text) {
  const auto slash = text.find('/');
  const auto bad = [&] {
    return ka::detail::str_cat("--shard '", text, "': expected I/N with 0 <= I < N (e.g. 0/4)");
  };
  KA_CHECK(slash != std::string::npos, bad());
  const auto index = parse_int64(text.substr(0, slash));
  const auto count = parse_int64(text.substr(slash + 1));
  KA_CHECK(index && count && *index >= 0 && *count >= 1 && *index < *count, bad());
  return {static_cast<std::size_t>(*index), static_cast<std::size_t>(*count)};
}

double estimated_work(const std::string& op, const std::string& shape) {
  const std::vector<std::int64_t> d = detail::parse_dims(op, shape);
  double product = 1.0;
  for (const std::int64_t v : d) product *= static_cast<double>(v);
  // Seconds per configuration on a modest core, give or take a factor of a few: a fixed cost
  // (a worker's extraction, packing, warm-up and bookkeeping) plus the timed calls, a few dozen
  // of them. A GEMM's dims are its loop extents (B, M, K, N): their product counts its
  // multiply-adds, at ~50 G/s. Other ops' dims are their input's sizes: elements, each read
  // and written at ~10 GB/s.
  constexpr double kFixed = 0.05;
  constexpr double kCalls = 30;
  const double call = detail::is_gemm(op) ? product / 50e9 : product * 8.0 / 10e9;
  return kFixed + kCalls * call;
}

namespace {

std::vector<std::string> distinct(const std::vector<std::string>& shapes) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const std::string& s : shapes) {
    if (seen.insert(s).second) out.push_back(s);
  }
  return out;
}

// Whole shapes dealt to `count` shards by the longest-processing-time rule.
std::vector<std::vector<ShardItem>> deal_shapes(const std::vector<ShardItem>& items,
                                                std::size_t count) {
  std::vector<std::size_t> order(items.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return items[a].work > items[b].work;
  });
  std::vector<double> load(count, 0.0);
  std::vector<std::vector<std::size_t>> taken(count);
  for (const std::size_t i : order) {
    const auto lightest =
        static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    load[lightest] += items[i].work;
    taken[lightest].push_back(i);
  }
  std::vector<std::vector<ShardItem>> plan(count);
  for (std::size_t s = 0; s < count; ++s) {
    std::sort(taken[s].begin(), taken[s].end());
    for (const std::size_t i : taken[s]) plan[s].push_back(items[i]);
  }
  return plan;
}

// Fewer shapes than shards: every shape sliced so that there is one item per shard.
std::vector<std::vector<ShardItem>> slice_shapes(const std::vector<ShardItem>& items,
                                                 std::size_t count) {
  std::vector<std::size_t> parts(items.size(), 1);
  for (std::size_t extra = items.size(); extra < count; ++extra) {
    std::size_t most = 0;
    for (std::size_t i = 1; i < items.size(); ++i) {
      if (items[i].work / static_cast<double>(parts[i]) >
          items[most].work / static_cast<double>(parts[most])) {
        most = i;
      }
    }
    ++parts[most];
  }
  std::vector<std::vector<ShardItem>> plan;
  for (std::size_t i = 0; i < items.size(); ++i) {
    for (std::size_t j = 0; j < parts[i]; ++j) {
      ShardItem item = items[i];
      item.slice = {j, parts[i]};
      item.work /= static_cast<double>(parts[i]);
      plan.push_back({item});
    }
  }
  return plan;
}

}  // namespace

std::vector<std::vector<ShardItem>> plan_shards(const std::string& op,
                                                const std::vector<std::string>& shapes,
                                                std::size_t count) {
  KA_CHECK(count >= 1, "a plan needs at least one shard");
  const std::vector<std::string> unique = distinct(shapes);
  KA_CHECK(!unique.empty(), "no shapes to plan for ", op);
  std::vector<ShardItem> items;
  for (const std::string& s : unique) items.push_back({s, {}, estimated_work(op, s)});
  // See Note [Shard plan].
  return unique.size() >= count ? deal_shapes(items, count) : slice_shapes(items, count);
}

std::string describe_plan(const std::string& op,
                          const std::vector<std::vector<ShardItem>>& plan, std::size_t marked) {
  double total = 0.0;
  std::size_t items = 0;
  for (const auto& shard : plan) {
    for (const ShardItem& item : shard) total += item.work;
    items += shard.size();
  }
  std::string out = fmt::format("plan: {} in {} shard(s), {} item(s); the work is a rough estimate "
                                "that only balances shards\n",
                                op, plan.size(), items);
  for (std::size_t s = 0; s < plan.size(); ++s) {
    double work = 0.0;
    for (const ShardItem& item : plan[s]) work += item.work;
    out += fmt::format("shard {}/{}: {} item(s), {:.1f}% of the work{}\n", s, plan.size(),
                       plan[s].size(), total > 0 ? 100.0 * work / total : 0.0,
                       s == marked ? "   <- this process (--shard)" : "");
    for (const ShardItem& item : plan[s]) {
      out += fmt::format("  {:<24} {}\n", item.shape,
                         item.slice.whole()
                             ? std::string("whole space")
                             : fmt::format("slice {} of {} of its space", item.slice.part,
                                           item.slice.parts));
    }
  }
  return out;
}

}  // namespace ka::tuner
