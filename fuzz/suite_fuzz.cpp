// load_suite_file on an arbitrary file: YAML syntax, the suite schema, graph templates and the
// TorchScript IR they instantiate (harness/src/suite.cpp).
#include "fuzz_target.hpp"

#include <ka/core/error.hpp>
#include <ka/harness/suite.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const ka::fuzz::ScratchFile file(".yaml");
  file.write(ka::fuzz::as_text(data, size));
  try {
    const ka::harness::Suite suite = ka::harness::load_suite_file(file.path());
    (void)suite;
  } catch (const ka::Error&) {
    // rejected
  }
  return 0;
}
