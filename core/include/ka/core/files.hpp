// Writing the files ka's tools produce (table exports, reports).
#pragma once

#include <string>
#include <string_view>

namespace ka {

/// Writes `text` to `path` through `path`.tmp renamed over it, so a reader (or a crash)
/// never sees half a file and an existing `path` is replaced whole or not at all. Throws
/// ka::IoError naming the file when it cannot be written.
void write_file_replacing(const std::string& path, std::string_view text);

}  // namespace ka
