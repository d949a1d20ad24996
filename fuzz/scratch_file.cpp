#include "fuzz_target.hpp"

#include <ka/core/error.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace ka::fuzz {
namespace fs = std::filesystem;

ScratchFile::ScratchFile(const std::string& suffix) {
  std::error_code ec;
  fs::path dir = "/dev/shm";
  if (!fs::is_directory(dir, ec)) dir = fs::temp_directory_path(ec);
  KA_CHECK_TYPE(IoError, !ec, "no folder for the fuzz scratch file: ", ec.message());
  path_ = (dir / ("ka-fuzz-" + std::to_string(::getpid()) + suffix)).string();
}

ScratchFile::~ScratchFile() {
  std::error_code ignored;
  for (const char* side : {"", "-journal", "-wal", "-shm"}) fs::remove(path_ + side, ignored);
}

void ScratchFile::write(std::string_view bytes) const {
  std::error_code ignored;
  for (const char* side : {"-journal", "-wal", "-shm"}) fs::remove(path_ + side, ignored);
  std::ofstream out(path_, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  KA_CHECK_TYPE(IoError, out.good(), "cannot write the fuzz scratch file '", path_, "'");
}

}  // namespace ka::fuzz
