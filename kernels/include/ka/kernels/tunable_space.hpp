// TunableSpace: a kernel's tunable parameters, their candidate values and constraints, as data.
#pragma once

#include <ka/core/launch_config.hpp>
#include <ka/core/status.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ka::kernels {

/// One tunable: its name (as in LaunchConfig params), the values a sweep tries, and what it is.
struct TunableParam {
  std::string name;
  std::vector<std::int64_t> candidates;
  std::string help;
};

/// A restriction on a combination of parameters, e.g. "tile_m % 6 == 0". `text` is shown to
/// users when a point is rejected.
struct Constraint {
  std::string text;
  std::function<bool(const LaunchConfig&)> holds;
};

/// The cross product of the parameters' candidates, filtered by the constraints.
class TunableSpace {
 public:
  TunableSpace() = default;
  TunableSpace(std::vector<TunableParam> params, std::vector<Constraint> constraints)
      : params_(std::move(params)), constraints_(std::move(constraints)) {}

  [[nodiscard]] const std::vector<TunableParam>& params() const noexcept { return params_; }
  [[nodiscard]] const std::vector<Constraint>& constraints() const noexcept { return constraints_; }

  /// Number of points in the raw cross product (before constraints).
  [[nodiscard]] std::uint64_t cross_product_size() const noexcept;
  /// Ok when every constraint holds and every parameter is present; otherwise the reason
  /// names the first violated constraint or missing parameter.
  [[nodiscard]] Status check(const LaunchConfig& point) const;
  /// Every valid point (params only; grid/block are left for the kernel to derive).
  [[nodiscard]] std::vector<LaunchConfig> enumerate() const;

 private:
  std::vector<TunableParam> params_;
  std::vector<Constraint> constraints_;
};

}  // namespace ka::kernels
