#include <ka/core/interrupt.hpp>

#include <atomic>
#include <csignal>
#include <iterator>

namespace ka {
namespace {

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

std::atomic<int> g_signal{0};
int g_depth = 0;  // scopes alive: only the outermost installs and restores
struct sigaction g_previous[sizeof(kStopSignals) / sizeof(kStopSignals[0])];

extern "C" void record_stop_signal(int signal_number) {
  int expected = 0;
  g_signal.compare_exchange_strong(expected, signal_number);
  // Any second stopping signal ends the process (std::signal is async-signal-safe).
  for (const int sig : kStopSignals) std::signal(sig, SIG_DFL);
}

}  // namespace

InterruptScope::InterruptScope() {
  if (g_depth++ > 0) return;
  g_signal.store(0);
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  // No SA_RESTART: a blocking wait (a worker's reply, a sleep) returns EINTR and notices.
  action.sa_flags = 0;
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i) {
    sigaction(kStopSignals[i], &action, &g_previous[i]);
  }
}

InterruptScope::~InterruptScope() {
  if (--g_depth > 0) return;
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i) {
    sigaction(kStopSignals[i], &g_previous[i], nullptr);
  }
  g_signal.store(0);
}

int interrupt_signal() noexcept { return g_signal.load(std::memory_order_relaxed); }

}  // namespace ka
