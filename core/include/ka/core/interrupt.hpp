// SIGINT, SIGTERM and SIGHUP as a request to stop: every ka tool stops the same way.
#pragma once

#include <exception>

namespace ka {

/// While alive, the first SIGINT, SIGTERM or SIGHUP only records the signal (interrupt_signal()
/// becomes non-zero) and restores the three signals' default actions, so a second one ends
/// the process at once; long work polls interrupt_signal() between items, stores what finished
/// and exits with 128 + the signal. The destructor restores the actions found on construction
/// and clears the record. Scopes nest (only the outermost installs and restores); create them
/// on one thread.
///
///   InterruptScope scope;
///   for (auto& item : work) { if (interrupt_signal() != 0) break; run(item); }
///   if (const int sig = interrupt_signal()) return 128 + sig;
class InterruptScope {
 public:
  InterruptScope();
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
};

/// The first stopping signal received inside the current InterruptScope, else 0.
int interrupt_signal() noexcept;

/// The error a tool's engine throws when it stopped for interrupt_signal(): what finished is
/// stored; main() prints the message and exits with exit_code().
class Interrupted : public std::exception {
 public:
  explicit Interrupted(int signal_number) : signal_(signal_number) {}
  [[nodiscard]] int signal_number() const noexcept { return signal_; }
  [[nodiscard]] int exit_code() const noexcept { return 128 + signal_; }
  [[nodiscard]] const char* what() const noexcept override { return "interrupted by a signal"; }

 private:
  int signal_;
};

}  // namespace ka
