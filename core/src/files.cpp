#include <ka/core/error.hpp>
#include <ka/core/files.hpp>

#include <filesystem>
#include <fstream>
#include <system_error>

namespace ka {

void write_file_replacing(const std::string& path, std::string_view text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    KA_CHECK_TYPE(IoError, out.good(), "cannot write '", tmp, "'");
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    KA_CHECK_TYPE(IoError, !out.fail(), "cannot write '", tmp, "'");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
  }
  KA_CHECK_TYPE(IoError, !ec, "cannot write '", path, "': ", ec.message());
}

}  // namespace ka
