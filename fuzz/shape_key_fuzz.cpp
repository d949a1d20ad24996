// ShapeKey::parse on arbitrary text (shape keys come from tables and ka-db's arguments).
// An accepted text must round-trip: parse(str()) equals the value with the same hash.
#include "fuzz_target.hpp"

#include <ka/core/error.hpp>
#include <ka/core/shape_key.hpp>

#include <cstdio>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ka::ShapeKey key;
  try {
    key = ka::ShapeKey::parse(ka::fuzz::as_text(data, size));
  } catch (const ka::Error&) {
    return 0;  // rejected
  }
  const ka::ShapeKey again = ka::ShapeKey::parse(key.str());
  if (again != key || again.hash() != key.hash() || again.args() != key.args() ||
      again.op() != key.op()) {
    std::fprintf(stderr, "ShapeKey round trip broken: '%s' -> '%s'\n", key.str().c_str(),
                 again.str().c_str());
    std::abort();
  }
  return 0;
}
