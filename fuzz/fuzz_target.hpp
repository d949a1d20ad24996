// Shared pieces of ka's fuzz targets (fuzz/*_fuzz.cpp). See Note [Fuzz targets].
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

// Note [Fuzz targets]
// Each *_fuzz.cpp defines LLVMFuzzerTestOneInput for one parser of untrusted input. A target
// only accepts or rejects: a ka::Error thrown for bad input is a rejection; anything else (a
// crash, another exception escaping, a sanitizer report, a leak, a broken round trip) is a
// finding. Every target is built twice: with libFuzzer under the `fuzz` preset (clang,
// ASan + UBSan; scripts/fuzz.sh runs them), and as a plain program with replay_main.cpp that
// runs the files it is given, which ctest uses to replay tests/fixtures/fuzz/<target>/ (the
// hand-written seeds and every crashing input found) under the ci preset.

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace ka::fuzz {

/// The input as text (bytes as they are, NULs included).
inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// A file rewritten with each input, for parsers that read a path (suites, SQLite files).
/// It lives in /dev/shm when there is one (no disk I/O per execution), else in $TMPDIR, named
/// after the process so parallel runs do not share it; removed at exit.
class ScratchFile {
 public:
  /// `suffix` ends the file name (".yaml", ".db"). Throws ka::IoError when it cannot be made.
  explicit ScratchFile(const std::string& suffix);
  ~ScratchFile();
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  /// Replaces the file's content by `bytes` and removes SQLite's side files (-journal, -wal,
  /// -shm) left by the previous input. Throws ka::IoError.
  void write(std::string_view bytes) const;
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

}  // namespace ka::fuzz
