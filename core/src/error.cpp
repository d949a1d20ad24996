#include <ka/core/error.hpp>

#include <cstring>

namespace ka::detail {

std::string source_location(const char* file, int line) {
  // Keep the path from the module folder down: "core/src/x.cpp:12", not the build machine's.
  std::string path(file);
  for (const char* marker : {"/core/", "/kernels/", "/db/", "/profiler/", "/harness/",
                             "/apps/", "/dispatch/", "/tests/"}) {
    const auto pos = path.rfind(marker);
    if (pos != std::string::npos) {
      path = path.substr(pos + 1);
      break;
    }
  }
  return path + ":" + std::to_string(line);
}

void throw_assert_failure(const char* file, int line, const char* condition,
                          const std::string& message) {
  std::string text = "internal error, please report: ";
  text += source_location(file, line);
  text += ": assertion '";
  text += condition;
  text += "' failed";
  if (!message.empty()) {
    text += ": " + message;
  }
  throw InternalError(text, source_location(file, line));
}

}  // namespace ka::detail
