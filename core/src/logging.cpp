#include <ka/core/logging.hpp>
#include <ka/core/option_checks.hpp>

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
  logger->set_level(spdlog::level::info);
  if (const char* env = std::getenv("KA_LOG_LEVEL"); env != nullptr && *env != '\0') {
    // The tools refuse a bad value as they start (check_environment); a library user is told.
    if (const auto level = log_level_from_name(env)) {
      logger->set_level(*level);
    } else {
      logger->warn("KA_LOG_LEVEL='{}' is not a level (expected {}); logging at info", env,
                   kLogLevelNames);
    }
  }
  return logger;
}

}  // namespace

spdlog::logger& log() {
  static const std::shared_ptr<spdlog::logger> logger = make_logger();
  return *logger;
}

void set_log_level(spdlog::level::level_enum level) { log().set_level(level); }

}  // namespace ka
