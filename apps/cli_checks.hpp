// CLI11 validators over ka's shared option checks (ka/core/option_checks.hpp), so that the
// three tools refuse a bad number with the same words: "--budget: '-1' is not a whole number
// >= 0". CLI11 runs them on the text, before it converts (which would wrap "-1" around).
#pragma once

#include <ka/core/option_checks.hpp>

#include <CLI/CLI.hpp>

#include <string>

namespace ka::apps {

/// A whole number >= `min`.
inline CLI::Validator whole_number(long long min) {
  return CLI::Validator(
      [min](std::string& text) { return ka::whole_number_error(text, min); },
      "INT>=" + std::to_string(min));
}

/// A finite number > 0 (>= 0 with `allow_zero`).
inline CLI::Validator finite_number(bool allow_zero) {
  return CLI::Validator(
      [allow_zero](std::string& text) { return ka::finite_number_error(text, allow_zero); },
      allow_zero ? "NUMBER>=0" : "NUMBER>0");
}

/// A thread count from 0 (all cores) to ka::max_threads().
inline CLI::Validator thread_count() {
  return CLI::Validator([](std::string& text) { return ka::thread_count_error(text); },
                        "0..MAX_THREADS");
}

}  // namespace ka::apps
