// Bounded busy-waiting for the hand-offs between a pool's threads.
#pragma once

#include <chrono>

namespace ka {

/// Tells the core this thread is spinning (x86 `pause`: yields the pipeline to a sibling
/// hyperthread and saves power); nothing elsewhere.
inline void pause_hint() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// Spins until `done()` holds or `budget` has passed, whichever comes first; returns done().
/// The clock is read every few dozen pauses, so the budget holds on any CPU, whatever its
/// pause costs (about 10 cycles on older cores, 40-140 on recent ones).
template <class Done>
bool spin_until(Done&& done, std::chrono::microseconds budget) {
  const auto until = std::chrono::steady_clock::now() + budget;
  while (true) {
    for (int i = 0; i < 32; ++i) {
      if (done()) return true;
      pause_hint();
    }
    if (std::chrono::steady_clock::now() >= until) return done();
  }
}

}  // namespace ka
