// A plain main() for a fuzz target (see Note [Fuzz targets] in fuzz_target.hpp): runs
// LLVMFuzzerTestOneInput on every file named on the command line and on every regular file
// of every folder named, in name order. A finding aborts the program or lets its exception
// escape (the test fails); a folder with no file is an error, so a missing fixture folder
// cannot pass by replaying nothing.
//
//   ka_fuzz_replay_suite tests/fixtures/fuzz/suite crash-1234
#include "fuzz_target.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

// Defined by targets that need one-time setup (libFuzzer calls it before the first input).
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {
namespace fs = std::filesystem;

std::vector<fs::path> files_of(const fs::path& arg) {
  std::vector<fs::path> files;
  if (!fs::is_directory(arg)) {
    files.push_back(arg);
    return files;
  }
  for (const auto& entry : fs::directory_iterator(arg)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

bool replay(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fuzz replay: error: cannot read '%s'\n", file.c_str());
    return false;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  std::fprintf(stderr, "fuzz replay: %s (%zu bytes)\n", file.c_str(), bytes.size());
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_FOLDER...\n", argv[0]);
    return 2;
  }
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  std::size_t replayed = 0;
  for (int i = 1; i < argc; ++i) {
    const auto files = files_of(argv[i]);
    if (files.empty()) {
      std::fprintf(stderr, "fuzz replay: error: no input file in '%s'\n", argv[i]);
      return 1;
    }
    for (const auto& f : files) {
      if (!replay(f)) return 1;
      ++replayed;
    }
  }
  std::printf("fuzz replay: %zu input(s), no finding\n", replayed);
  return 0;
}
