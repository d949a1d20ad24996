// Logging through spdlog; the level comes from KA_LOG_LEVEL (trace, debug, info, warn, error, off).
#pragma once

#include <spdlog/spdlog.h>

namespace ka {

/// The process-wide "ka" logger, writing to stderr. Created on first use with the level named
/// by KA_LOG_LEVEL (default: info). Thread-safe.
spdlog::logger& log();

/// Overrides the level set from the environment (e.g. for a `--verbose` flag).
void set_log_level(spdlog::level::level_enum level);

}  // namespace ka
