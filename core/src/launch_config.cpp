#include <ka/core/error.hpp>
#include <ka/core/launch_config.hpp>
#include <ka/core/text.hpp>

#include <algorithm>

namespace ka {
namespace {

bool valid_param_name(std::string_view name) {
  if (name.empty() || name == "grid" || name == "block" || name == "smem") {
    return false;
  }
  if (!(name[0] == '_' || (name[0] >= 'a' && name[0] <= 'z'))) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
  });
}

Dim3 parse_dim3(std::string_view text, std::string_view token) {
  const auto parts = split(text, 'x');
  KA_CHECK(parts.size() == 3, "bad extent '", token, "' in launch config: expected AxBxC");
  Dim3 d;
  std::int64_t* fields[3] = {&d.x, &d.y, &d.z};
  for (std::size_t i = 0; i < 3; ++i) {
    const auto v = parse_int64(parts[i]);
    KA_CHECK(v.has_value() && *v >= 1, "bad extent '", token,
             "' in launch config: each of AxBxC must be an integer >= 1");
    *fields[i] = *v;
  }
  return d;
}

}  // namespace

LaunchConfig& LaunchConfig::set(std::string_view name, std::int64_t value) {
  KA_CHECK(valid_param_name(name), "bad launch-config parameter name '", name,
           "': expected [a-z_][a-z0-9_]*, not grid/block/smem");
  const auto it = std::lower_bound(
      params_.begin(), params_.end(), name,
      [](const std::pair<std::string, std::int64_t>& p, std::string_view n) { return p.first < n; });
  if (it != params_.end() && it->first == name) {
    it->second = value;
  } else {
    params_.emplace(it, std::string(name), value);
  }
  return *this;
}

std::optional<std::int64_t> LaunchConfig::get(std::string_view name) const noexcept {
  const auto it = std::lower_bound(
      params_.begin(), params_.end(), name,
      [](const std::pair<std::string, std::int64_t>& p, std::string_view n) { return p.first < n; });
  if (it != params_.end() && it->first == name) {
    return it->second;
  }
  return std::nullopt;
}

std::int64_t LaunchConfig::get_or(std::string_view name, std::int64_t fallback) const noexcept {
  return get(name).value_or(fallback);
}

std::string LaunchConfig::str() const {
  std::string out = "grid=" + std::to_string(grid.x) + "x" + std::to_string(grid.y) + "x" +
                    std::to_string(grid.z) + " block=" + std::to_string(block.x) + "x" +
                    std::to_string(block.y) + "x" + std::to_string(block.z);
  if (shared_mem_bytes != 0) {
    out += " smem=" + std::to_string(shared_mem_bytes);
  }
  for (const auto& [name, value] : params_) {
    out += ' ' + name + '=' + std::to_string(value);
  }
  return out;
}

std::string LaunchConfig::params_str() const {
  std::string out;
  for (const auto& [name, value] : params_) {
    out += (out.empty() ? "" : " ") + name + '=' + std::to_string(value);
  }
  return out;
}

LaunchConfig LaunchConfig::parse(std::string_view text) {
  LaunchConfig config;
  bool seen_grid = false;
  bool seen_block = false;
  bool seen_smem = false;
  for (std::string_view token : split(text, ' ')) {
    if (token.empty()) {
      continue;
    }
    const auto eq = token.find('=');
    KA_CHECK(eq != std::string_view::npos && eq > 0 && eq + 1 < token.size(), "bad token '",
             token, "' in launch config '", text, "': expected name=value");
    const std::string_view name = token.substr(0, eq);
    const std::string_view value = token.substr(eq + 1);
    if (name == "grid") {
      KA_CHECK(!seen_grid, "duplicate 'grid' in launch config '", text, "'");
      config.grid = parse_dim3(value, token);
      seen_grid = true;
    } else if (name == "block") {
      KA_CHECK(!seen_block, "duplicate 'block' in launch config '", text, "'");
      config.block = parse_dim3(value, token);
      seen_block = true;
    } else if (name == "smem") {
      KA_CHECK(!seen_smem, "duplicate 'smem' in launch config '", text, "'");
      const auto v = parse_int64(value);
      KA_CHECK(v.has_value() && *v >= 0, "bad shared-memory size '", token, "' in launch config");
      config.shared_mem_bytes = *v;
      seen_smem = true;
    } else {
      KA_CHECK(!config.get(name).has_value(), "duplicate parameter '", name,
               "' in launch config '", text, "'");
      const auto v = parse_int64(value);
      KA_CHECK(v.has_value(), "bad value in '", token, "' in launch config: expected an integer");
      config.set(name, *v);
    }
  }
  return config;
}

}  // namespace ka
