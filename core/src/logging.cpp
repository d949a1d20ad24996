#include <ka/core/logging.hpp>

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <memory>
#include <string>

namespace ka {
namespace {

std::shared_ptr<spdlog::logger> make_logger() {
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>("ka", std::move(sink));
  logger->set_pattern("[ka %^%l%$] %v");
  auto level = spdlog::level::info;
  if (const char* env = std::getenv("KA_LOG_LEVEL"); env != nullptr && *env != '\0') {
    const auto parsed = spdlog::level::from_str(env);
    // from_str maps unknown names to "off"; only accept it when the user asked for it.
    if (parsed != spdlog::level::off || std::string(env) == "off") {
      level = parsed;
    }
  }
  logger->set_level(level);
  return logger;
}

}  // namespace

spdlog::logger& log() {
  static const std::shared_ptr<spdlog::logger> logger = make_logger();
  return *logger;
}

void set_log_level(spdlog::level::level_enum level) { log().set_level(level); }

}  // namespace ka
