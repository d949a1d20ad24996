// A fresh directory per test, for tests that write files (databases, exports).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace ka::test {

/// An empty directory under the system's temporary directory, named after the running test,
/// removed with everything in it when destroyed.
///
///   ScratchDir dir;
///   ResultsStore store(dir.path("ka.db"));
class ScratchDir {
 public:
  ScratchDir() {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = std::filesystem::temp_directory_path() /
            (std::string("ka_") + test->test_suite_name() + "_" + test->name());
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  /// The path of `name` inside the directory.
  [[nodiscard]] std::string path(const std::string& name) const { return (root_ / name).string(); }

 private:
  std::filesystem::path root_;
};

}  // namespace ka::test
