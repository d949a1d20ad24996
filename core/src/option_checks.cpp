#include <ka/core/cpu_cores.hpp>
#include <ka/core/error.hpp>
#include <ka/core/option_checks.hpp>
#include <ka/core/text.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>

namespace ka {
namespace {

std::string quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

// The whole text as a double, or NaN when it is not one.
double parse_double(std::string_view text) {
  const std::string s(text);
  if (s.empty()) return std::nan("");
  char* end = nullptr;
  const double value = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() ? value : std::nan("");
}

std::string thread_bound_text() {
  const auto hw = static_cast<unsigned>(usable_cores());
  return detail::str_cat(max_threads(), " (4 x ", hw, " logical cores, at most 1024)");
}

}  // namespace

std::string whole_number_error(std::string_view text, long long min) {
  const auto value = parse_int64(text);
  if (value.has_value() && *value >= min) return {};
  return detail::str_cat(quoted(text), " is not a whole number >= ", min);
}

std::string finite_number_error(std::string_view text, bool allow_zero) {
  const double value = parse_double(text);
  if (std::isfinite(value) && (value > 0 || (allow_zero && value == 0))) return {};
  return detail::str_cat(quoted(text), " is not a finite number ", allow_zero ? ">= 0" : "> 0");
}

int max_threads() {
  const auto hw = static_cast<unsigned>(usable_cores());
  return static_cast<int>(std::min(4U * hw, 1024U));
}

std::string thread_count_error(std::string_view text) {
  const auto value = parse_int64(text);
  if (value.has_value() && *value >= 0 && *value <= max_threads()) return {};
  return detail::str_cat(quoted(text), " is not a thread count from 0 (all cores) to ",
                         thread_bound_text());
}

int env_thread_limit() {
  const char* env = std::getenv("KA_NUM_THREADS");
  if (env == nullptr || *env == '\0') return 0;
  const auto value = parse_int64(env);
  KA_CHECK(value.has_value() && *value >= 1 && *value <= max_threads(), "KA_NUM_THREADS=",
           quoted(env), ": expected a whole number of threads from 1 to ", thread_bound_text());
  return static_cast<int>(*value);
}

std::int64_t env_packed_weights_bytes() {
  constexpr std::int64_t kDefaultMib = 1024;
  constexpr std::int64_t kMaxMib = std::int64_t{1} << 30;  // no overflow in bytes
  const char* env = std::getenv("KA_PACKED_WEIGHTS_MIB");
  if (env == nullptr || *env == '\0') return kDefaultMib << 20;
  const auto value = parse_int64(env);
  KA_CHECK(value.has_value() && *value >= 0 && *value <= kMaxMib, "KA_PACKED_WEIGHTS_MIB=",
           quoted(env), ": expected a whole number of MiB from 0 (pack on every call) to ",
           kMaxMib);
  return *value << 20;
}

std::optional<spdlog::level::level_enum> log_level_from_name(std::string_view name) {
  using spdlog::level::level_enum;
  static const std::pair<std::string_view, level_enum> kNames[] = {
      {"trace", level_enum::trace}, {"debug", level_enum::debug},
      {"info", level_enum::info},   {"warn", level_enum::warn},
      {"warning", level_enum::warn}, {"error", level_enum::err},
      {"err", level_enum::err},     {"critical", level_enum::critical},
      {"off", level_enum::off},
  };
  for (const auto& [text, level] : kNames) {
    if (text == name) return level;
  }
  return std::nullopt;
}

void check_environment() {
  env_thread_limit();
  env_packed_weights_bytes();
  if (const char* env = std::getenv("KA_LOG_LEVEL"); env != nullptr && *env != '\0') {
    KA_CHECK(log_level_from_name(env).has_value(), "KA_LOG_LEVEL=", quoted(env),
             ": expected one of ", kLogLevelNames);
  }
}

void require_database_file(std::string_view option, std::string_view path) {
  KA_CHECK(!path.empty() && path != ":memory:", option, " ", quoted(path),
           ": the results go to this database, so it must name a file ('' and ':memory:' keep "
           "nothing)");
}

}  // namespace ka
