#include <ka/core/error.hpp>
#include <ka/core/interrupt.hpp>
#include <ka/core/subprocess.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace ka {

ChildProcess::ChildProcess(const std::vector<std::string>& argv,
                           const std::vector<std::string>& extra_env, const char* fd_variable) {
  int fds[2];
  KA_CHECK_TYPE(IoError, ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0,
                "cannot create a socket for a child process: ", std::strerror(errno));
  // Everything the child needs is built before fork: between fork and exec only
  // async-signal-safe calls are made.
  const std::string prefix = std::string(fd_variable) + "=";
  std::vector<std::string> env_text;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, prefix.c_str(), prefix.size()) != 0) env_text.emplace_back(*e);
  }
  env_text.insert(env_text.end(), extra_env.begin(), extra_env.end());
  env_text.push_back(prefix + std::to_string(fds[1]));
  std::vector<char*> envp;
  for (std::string& s : env_text) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> arg_text = argv;
  std::vector<char*> args;
  for (std::string& s : arg_text) args.push_back(s.data());
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    KA_THROW(IoError, "cannot start a child process: ", std::strerror(errno));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the supervisor died before prctl
    ::fcntl(fds[1], F_SETFD, 0);              // the child's end survives exec
    ::execve("/proc/self/exe", args.data(), envp.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  pid_ = pid;
  fd_ = fds[0];
}

ChildProcess::~ChildProcess() { reap(); }

ChildProcess::Wait ChildProcess::wait_readable(std::optional<Clock::time_point> until,
                                               bool notice_interrupt) {
  for (;;) {
    if (notice_interrupt && interrupt_signal() != 0) return Wait::kInterrupted;
    std::int64_t wait_ms = 1000;  // a signal is noticed within a second even without EINTR
    if (until) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(*until - Clock::now()).count();
      if (left <= 0) return Wait::kDeadline;
      wait_ms = std::min<std::int64_t>(wait_ms, left);
    }
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(wait_ms)) > 0) return Wait::kReadable;
  }
}

void ChildProcess::signal(int sig) const {
  if (pid_ > 0) ::kill(pid_, sig);
}

int ChildProcess::reap(std::chrono::milliseconds grace) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (pid_ < 0) return status_;
  const auto until = Clock::now() + grace;
  for (;;) {
    const pid_t done = ::waitpid(pid_, &status_, WNOHANG);
    if (done == pid_ || (done < 0 && errno != EINTR)) break;
    if (Clock::now() >= until) {
      ::kill(pid_, SIGKILL);
      while (::waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  pid_ = -1;
  return status_;
}

int ChildProcess::kill_and_reap() {
  signal(SIGKILL);
  return reap();
}

namespace {

constexpr std::uint32_t kMaxMessageBytes = 64u << 20;

void append_u32(std::string& out, std::uint32_t v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// [bytes][fields][length, bytes]...: lengths in the host's byte order (both ends are this
// program on this machine).
std::string encode(const std::vector<std::string>& fields) {
  std::string body;
  append_u32(body, static_cast<std::uint32_t>(fields.size()));
  for (const std::string& field : fields) {
    append_u32(body, static_cast<std::uint32_t>(field.size()));
    body += field;
  }
  std::string out;
  append_u32(out, static_cast<std::uint32_t>(body.size()));
  return out + body;
}

// Fields are checked as they are read: a peer's bytes are data.
std::vector<std::string> decode(const std::string& body) {
  std::size_t at = 0;
  auto u32 = [&]() {
    KA_CHECK_TYPE(IoError, at + 4 <= body.size(), "child process: truncated message");
    std::uint32_t v = 0;
    std::memcpy(&v, body.data() + at, 4);
    at += 4;
    return v;
  };
  const std::uint32_t n = u32();
  std::vector<std::string> fields;
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint32_t len = u32();
    KA_CHECK_TYPE(IoError, at + len <= body.size(), "child process: truncated message");
    fields.emplace_back(body.data() + at, len);
    at += len;
  }
  return fields;
}

// Reads exactly `size` bytes; false on end of file or error.
bool read_exact(int fd, char* out, std::size_t size, const std::function<void()>& before_read) {
  std::size_t got = 0;
  while (got < size) {
    if (before_read) before_read();
    const ssize_t n = ::read(fd, out + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    got += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

bool send_message(int fd, const std::vector<std::string>& fields) {
  const std::string bytes = encode(fields);
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

bool read_message(int fd, std::vector<std::string>& fields,
                  const std::function<void()>& before_read) {
  std::uint32_t size = 0;
  if (!read_exact(fd, reinterpret_cast<char*>(&size), sizeof size, before_read)) return false;
  KA_CHECK_TYPE(IoError, size <= kMaxMessageBytes, "child process: a message of ", size,
                " bytes is over the limit");
  std::string body(size, '\0');
  if (!read_exact(fd, body.data(), size, before_read)) return false;
  fields = decode(body);
  return true;
}

std::string describe_wait_status(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return fmt::format("killed by signal {} ({})", sig, strsignal(sig));
  }
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  return "stopped without an exit status";
}

bool exited_cleanly(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

}  // namespace ka
