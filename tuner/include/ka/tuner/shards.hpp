// Shards: a ka-tune command's work split into N deterministic, disjoint parts that together
// are exactly the unsharded work (ka-tune --shard I/N, --plan; campaigns over Slurm).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ka::tuner {

/// Part `part` of `parts` of one shape's configuration space (Note [Space slices] in
/// shards.cpp); {0, 1} is the whole space.
struct ShapeSlice {
  std::size_t part = 0;
  std::size_t parts = 1;
  [[nodiscard]] bool whole() const noexcept { return parts == 1; }
};

/// One unit of a shard's work: a shape of the command's op, or a slice of its space.
struct ShardItem {
  std::string shape;
  ShapeSlice slice;
  double work = 0.0;  ///< Estimated cost (estimated_work()), the slice's share of it.
};

/// Which shard a process runs: "I/N" with 0 <= I < N.
struct ShardId {
  std::size_t index = 0;
  std::size_t count = 1;
};

/// Parses "I/N" (ka-tune --shard). Throws ka::ValueError naming the text and the form.
ShardId parse_shard(const std::string& text);

/// A rough cost of one configuration of `op` at `shape` in seconds, for balancing shards only:
/// a fixed cost plus the timed calls (GEMM multiply-adds, or input elements). Throws
/// ka::ValueError for a bad shape.
double estimated_work(const std::string& op, const std::string& shape);

/// The partition of `shapes` of `op` into `count` shards (Note [Shard plan] in shards.cpp).
/// Repeated shapes count once. Every shard is non-empty; the same arguments give the same
/// plan in every process. Throws ka::ValueError when count is 0, there are no shapes, or a
/// shape is bad.
std::vector<std::vector<ShardItem>> plan_shards(const std::string& op,
                                                const std::vector<std::string>& shapes,
                                                std::size_t count);

/// The plan as people read it (ka-tune --plan): per shard its items and share of the work;
/// `marked` (count when none) is flagged as the shard this process would run.
std::string describe_plan(const std::string& op,
                          const std::vector<std::vector<ShardItem>>& plan, std::size_t marked);

}  // namespace ka::tuner
