#include <ka/core/interrupt.hpp>

#include <gtest/gtest.h>

#include <csignal>

namespace ka {
namespace {

// The action installed for `sig` now.
void (*handler_of(int sig))(int) {
  struct sigaction now {};
  sigaction(sig, nullptr, &now);
  return now.sa_handler;
}

TEST(InterruptScope, FirstSignalIsRecordedNotFatalAndTheSecondGetsTheDefault) {
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    const auto before = handler_of(sig);
    {
      const InterruptScope scope;
      EXPECT_EQ(interrupt_signal(), 0);
      EXPECT_NE(handler_of(sig), SIG_DFL);
      std::raise(sig);
      EXPECT_EQ(interrupt_signal(), sig);
      // A second signal, of any of the three kinds, would end the process.
      for (const int other : {SIGINT, SIGTERM, SIGHUP}) EXPECT_EQ(handler_of(other), SIG_DFL);
    }
    EXPECT_EQ(interrupt_signal(), 0);
    EXPECT_EQ(handler_of(sig), before);
  }
}

TEST(InterruptScope, NestedScopesKeepWhatTheOuterOneRecorded) {
  const InterruptScope outer;
  {
    const InterruptScope inner;  // installs nothing of its own
    std::raise(SIGHUP);
    EXPECT_EQ(interrupt_signal(), SIGHUP);
  }
  EXPECT_EQ(interrupt_signal(), SIGHUP);  // the inner scope's end does not clear it
  const InterruptScope again;             // nor does a new inner scope
  EXPECT_EQ(interrupt_signal(), SIGHUP);
}

TEST(Interrupted, ExitCodeIs128PlusTheSignal) {
  EXPECT_EQ(Interrupted(SIGTERM).exit_code(), 128 + SIGTERM);
  EXPECT_EQ(Interrupted(SIGINT).signal_number(), SIGINT);
}

}  // namespace
}  // namespace ka
