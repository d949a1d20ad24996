// How the machine-limit probes time work on several threads at once.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace ka::profiler::detail {

/// Runs fn(t) for t in [0, threads) on that many new threads, released together once all are
/// running; returns the wall seconds from the release to the last thread's end.
template <typename Fn>
double timed_parallel(int threads, const Fn& fn) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> workers;
  workers.reserve(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      fn(t);
    });
  }
  while (ready.load() < threads) {
  }
  const auto t0 = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  for (auto& w : workers) w.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace ka::profiler::detail
