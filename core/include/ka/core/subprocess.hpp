// A supervised child process: this program run again, connected by a socket.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace ka {

/// This program (/proc/self/exe, so whatever the binary registered is there too) started
/// again with `argv` and the environment plus `extra_env` ("NAME=value"), holding one end of
/// a socket pair whose descriptor number is in the environment variable `fd_variable`. The
/// child runs in its own process group (a Ctrl-C at the terminal reaches only the
/// supervisor, which decides what the child is told) and is killed when the supervisor dies,
/// even by kill -9 (PR_SET_PDEATHSIG). The destructor closes the socket and reaps the child,
/// killing it when it does not exit within a second.
///
///   ChildProcess child({"ka-trial-worker"}, {}, "KA_TRIAL_WORKER_FD");
///   write(child.fd(), ...);
///   if (child.wait_readable(deadline) == ChildProcess::Wait::kReadable) read(child.fd(), ...);
class ChildProcess {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Wait { kReadable, kDeadline, kInterrupted };

  /// Throws ka::IoError when the socket or the process cannot be created.
  ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
               const char* fd_variable);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  /// The supervisor's end of the socket (-1 once closed).
  [[nodiscard]] int fd() const noexcept { return fd_; }
  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  /// Blocks until the socket is readable (data, or the child closed it), `until` passes
  /// (never, when nullopt) or, with `notice_interrupt`, a stop signal has arrived
  /// (ka::interrupt_signal()).
  Wait wait_readable(std::optional<Clock::time_point> until, bool notice_interrupt = true);
  /// Sends `sig` to the child (not to its group).
  void signal(int sig) const;
  /// Closes the socket and reaps the child, waiting up to `grace` for it to exit before
  /// killing it (SIGKILL); returns its wait status. Idempotent: later calls return the same.
  int reap(std::chrono::milliseconds grace = std::chrono::milliseconds(1000));
  /// SIGKILL, then reap(); returns the wait status.
  int kill_and_reap();

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  int status_ = 0;
};

/// Sends one message (a list of strings) over a socket; false when the peer is gone (no
/// SIGPIPE).
bool send_message(int fd, const std::vector<std::string>& fields);
/// Reads one message; false at end of file (the peer closed or died). `before_read`, when
/// set, runs before each read and may throw (a deadline). Throws ka::IoError for a malformed
/// or oversized (> 64 MiB) message.
bool read_message(int fd, std::vector<std::string>& fields,
                  const std::function<void()>& before_read = {});

/// "killed by signal 11 (Segmentation fault)", "exited with status 3": a wait status for
/// people.
std::string describe_wait_status(int status);

/// Whether a wait status is a normal exit with status 0.
bool exited_cleanly(int status);

}  // namespace ka
