#include <ka/core/interrupt.hpp>

#include <atomic>
#include <csignal>
#include <iterator>

namespace ka {
namespace {

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

std::atomic<int> g_signal{0};
struct sigaction g_previous[sizeof(kStopSignals) / sizeof(kStopSignals[0])];

extern "C" void record_stop_signal(int signal_number) {
  int expected = 0;
  g_signal.compare_exchange_strong(expected, signal_number);
  // SA_RESETHAND already restored the default action: a second signal ends the process.
}

}  // namespace

InterruptScope::InterruptScope() {
  g_signal.store(0);
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  // No SA_RESTART: a blocking wait (a worker's reply, a sleep) returns EINTR and notices.
  action.sa_flags = SA_RESETHAND;
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i) {
    sigaction(kStopSignals[i], &action, &g_previous[i]);
  }
}

InterruptScope::~InterruptScope() {
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i) {
    sigaction(kStopSignals[i], &g_previous[i], nullptr);
  }
  g_signal.store(0);
}

int interrupt_signal() noexcept { return g_signal.load(std::memory_order_relaxed); }

}  // namespace ka
