// Warming every pool thread a parallel call may use, for tests that count what a warm call
// allocates.
#pragma once

#include <ka/core/thread_pool.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>

namespace ka::test {

/// Runs fn once on each pool thread that a call on `threads` threads uses (the caller and
/// workers 0 .. threads-2), all at once: each block waits until every block has started, so
/// no thread runs two. A kernel called inside runs inline on that thread, so its per-thread
/// buffers grow there. Which pool thread runs which part of a real call is up to the
/// scheduler: on a loaded machine a helper may run its first part only after many calls.
inline void on_each_pool_thread(std::int64_t threads, const std::function<void()>& fn) {
  const int n = static_cast<int>(
      std::min<std::int64_t>(std::max<std::int64_t>(threads, 1), ThreadPool::global().max_threads()));
  std::atomic<int> started{0};
  ThreadPool::global().parallel_for(n, n, [&](std::int64_t) {
    started.fetch_add(1);
    while (started.load() < n) std::this_thread::yield();
    fn();
  });
}

}  // namespace ka::test
