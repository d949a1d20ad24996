// LaunchConfig::parse on arbitrary text (launch configurations come from tables and --config).
// An accepted text must round-trip: parse(str()) equals the value, and str() is a fixed point.
#include "fuzz_target.hpp"

#include <ka/core/error.hpp>
#include <ka/core/launch_config.hpp>

#include <cstdio>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ka::LaunchConfig config;
  try {
    config = ka::LaunchConfig::parse(ka::fuzz::as_text(data, size));
  } catch (const ka::Error&) {
    return 0;  // rejected
  }
  const std::string text = config.str();
  const ka::LaunchConfig again = ka::LaunchConfig::parse(text);
  if (!(again == config) || again.str() != text) {
    std::fprintf(stderr, "LaunchConfig round trip broken: '%s' -> '%s'\n", text.c_str(),
                 again.str().c_str());
    std::abort();
  }
  return 0;
}
