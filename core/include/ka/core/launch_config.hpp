// LaunchConfig: how a kernel is launched (grid, block, shared memory, named tunables).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ka {

/// Three extents, as CUDA's dim3. Every extent is >= 1.
struct Dim3 {
  std::int64_t x = 1;
  std::int64_t y = 1;
  std::int64_t z = 1;

  [[nodiscard]] std::int64_t volume() const noexcept { return x * y * z; }
  friend bool operator==(const Dim3& a, const Dim3& b) {
    return a.x == b.x && a.y == b.y && a.z == b.z;
  }
  friend bool operator!=(const Dim3& a, const Dim3& b) { return !(a == b); }
};

/// A kernel launch configuration, the same shape on CPU and CUDA (DESIGN.md §2): on CPU,
/// `block` is the tile one worker computes and `grid` the number of tiles; named tunables
/// (tile_k, threads, unroll, ...) ride in `params`, kept sorted by name.
///
/// Canonical text form, which parse() turns back into an equal value:
///   grid=8x4x1 block=128x1x1 smem=4096 threads=2 tile_k=64
/// (`smem=` is omitted when zero; params follow in name order.)
///
///   LaunchConfig c;
///   c.block = {128, 64, 1};
///   c.set("tile_k", 256);
///   auto same = LaunchConfig::parse(c.str());   // same == c
class LaunchConfig {
 public:
  Dim3 grid;
  Dim3 block;
  std::int64_t shared_mem_bytes = 0;

  /// Sets (or replaces) a named tunable. Names are [a-z_][a-z0-9_]* and not grid/block/smem;
  /// throws ka::ValueError otherwise.
  LaunchConfig& set(std::string_view name, std::int64_t value);
  /// The tunable's value, or nullopt when absent.
  [[nodiscard]] std::optional<std::int64_t> get(std::string_view name) const noexcept;
  /// The tunable's value, or `fallback` when absent.
  [[nodiscard]] std::int64_t get_or(std::string_view name, std::int64_t fallback) const noexcept;
  /// All tunables, sorted by name.
  [[nodiscard]] const std::vector<std::pair<std::string, std::int64_t>>& params() const noexcept {
    return params_;
  }

  /// Canonical text form (see the class comment).
  [[nodiscard]] std::string str() const;
  /// The tunables only, for people: "threads=2 tile_k=256 tile_m=96".
  [[nodiscard]] std::string params_str() const;
  /// Parses the text form; fields may come in any order. Throws ka::ValueError naming the bad
  /// token on malformed text, duplicates, or non-positive extents.
  static LaunchConfig parse(std::string_view text);

  friend bool operator==(const LaunchConfig& a, const LaunchConfig& b) {
    return a.grid == b.grid && a.block == b.block && a.shared_mem_bytes == b.shared_mem_bytes &&
           a.params_ == b.params_;
  }
  friend bool operator!=(const LaunchConfig& a, const LaunchConfig& b) { return !(a == b); }

 private:
  std::vector<std::pair<std::string, std::int64_t>> params_;
};

}  // namespace ka
