// Checks of the values the tools take from their command lines and environment, shared so
// that every tool refuses the same bad value with the same words.
#pragma once

#include <spdlog/common.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ka {

/// Empty when `text` is a whole number >= `min` (no sign wrap-around: "-1" is refused, not
/// read as 2^64 - 1); else why not, quoting `text`. For CLI11 validators.
std::string whole_number_error(std::string_view text, long long min);

/// Empty when `text` is a finite number >= 0 (> 0 unless `allow_zero`); else why not, quoting
/// `text` ("nan", "inf" and negative values are refused).
std::string finite_number_error(std::string_view text, bool allow_zero);

/// The most threads a tool accepts for --threads or KA_NUM_THREADS: 4 × the logical cores,
/// at most 1024 (beyond that a pool only multiplies context switches).
int max_threads();

/// Empty when `text` is a thread count in [0, max_threads()] (0: all cores); else why not,
/// with the bound.
std::string thread_count_error(std::string_view text);

/// KA_NUM_THREADS as a thread limit, 0 when unset or empty. Throws ka::ValueError naming the
/// variable, its value and the accepted range unless it is a whole number in
/// [1, max_threads()].
int env_thread_limit();

/// KA_PACKED_WEIGHTS_MIB in bytes: how much memory constant weights packed once may take
/// (Note [Constant weights packed once]); 1024 MiB when unset or empty, 0 packs on every call.
/// Throws ka::ValueError naming the variable and its value unless a whole number of MiB >= 0.
std::int64_t env_packed_weights_bytes();

/// The names KA_LOG_LEVEL accepts, for messages.
inline constexpr const char* kLogLevelNames = "trace, debug, info, warn, error, critical or off";

/// The level `name` stands for (one of kLogLevelNames, also spdlog's "warning" and "err"), or
/// nullopt for anything else.
std::optional<spdlog::level::level_enum> log_level_from_name(std::string_view name);

/// Throws ka::ValueError naming the variable, its value and what is accepted when
/// KA_NUM_THREADS, KA_LOG_LEVEL or KA_PACKED_WEIGHTS_MIB is set to a value ka refuses. Tools call it as they start.
void check_environment();

/// Throws ka::ValueError naming `option` when `path` names no file ('' or ':memory:'): a tool
/// whose output is the database would keep nothing.
void require_database_file(std::string_view option, std::string_view path);

}  // namespace ka
