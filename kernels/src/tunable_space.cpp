#include <ka/kernels/tunable_space.hpp>

namespace ka::kernels {

std::uint64_t TunableSpace::cross_product_size() const noexcept {
  std::uint64_t n = params_.empty() ? 0 : 1;
  for (const auto& p : params_) n *= p.candidates.size();
  return n;
}

Status TunableSpace::check(const LaunchConfig& point) const {
  for (const auto& p : params_) {
    if (!point.get(p.name).has_value()) {
      return Status::unsupported("missing tunable '" + p.name + "'");
    }
  }
  for (const auto& c : constraints_) {
    if (!c.holds(point)) {
      return Status::unsupported("violates constraint '" + c.text + "'");
    }
  }
  return Status::ok();
}

std::vector<LaunchConfig> TunableSpace::enumerate() const {
  std::vector<LaunchConfig> points;
  if (params_.empty()) return points;
  for (const auto& p : params_) {
    if (p.candidates.empty()) return points;
  }
  std::vector<std::size_t> index(params_.size(), 0);
  while (true) {
    LaunchConfig point;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      point.set(params_[i].name, params_[i].candidates[index[i]]);
    }
    if (check(point)) points.push_back(std::move(point));
    // Odometer increment, last parameter fastest.
    std::size_t i = params_.size();
    while (i > 0) {
      --i;
      if (++index[i] < params_[i].candidates.size()) break;
      index[i] = 0;
      if (i == 0) return points;
    }
  }
}

}  // namespace ka::kernels
