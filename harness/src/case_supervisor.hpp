// The case runner's side of ka-bench --isolate (Note [Isolated cases], case_supervisor.cpp).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace ka::harness::detail {

/// What a ka-bench started by a case supervisor is told and tells: cases to leave out, the
/// run to continue, and each case as it starts. Null (current() == nullptr) in a ka-bench
/// that no supervisor started.
class SupervisedRun {
 public:
  /// This process's link to its supervisor, or nullptr.
  static SupervisedRun* current();

  /// The stored run to continue (0: begin a new one).
  [[nodiscard]] std::int64_t resume_run_id() const noexcept { return resume_run_id_; }
  /// Cases earlier runners finished or lost: not run again.
  [[nodiscard]] const std::set<std::string>& skipped_cases() const noexcept { return skipped_; }

  void report_run(std::int64_t run_id);
  /// Case `name` starts; `benchmarks` are its benchmark names (one per variant). Runs the
  /// test-only fault KA_TEST_CASE_FAULT asks for this case, if any (Note [Isolated cases]).
  void report_case(const std::string& name, const std::vector<std::string>& benchmarks);
  /// Every benchmark ran: whatever this process does next is its own (errors, exit code).
  void report_done();

 private:
  SupervisedRun(int fd, std::int64_t resume_run_id, std::set<std::string> skipped)
      : fd_(fd), resume_run_id_(resume_run_id), skipped_(std::move(skipped)) {}

  int fd_;
  std::int64_t resume_run_id_;
  std::set<std::string> skipped_;
};

}  // namespace ka::harness::detail
