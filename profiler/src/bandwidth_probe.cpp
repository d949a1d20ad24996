// The copy-bandwidth probe (STREAM "Copy"). Compiled with -fno-tree-loop-distribute-patterns so
// the copy loop stays a loop of ordinary loads and stores instead of becoming a memcpy call
// (glibc's memcpy switches to non-temporal stores for large copies, which no element-wise
// kernel here uses).
#include <ka/profiler/peak_probe.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace ka::profiler {
namespace {

using Clock = std::chrono::steady_clock;

void copy_floats(const float* __restrict src, float* __restrict dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = src[i];
}

// Runs fn(t) on `threads` threads released together; returns the wall seconds from release
// to the last thread's end.
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
  const auto t0 = Clock::now();
  go.store(true, std::memory_order_release);
  for (auto& w : workers) w.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

BandwidthMeasurement measure_copy_bandwidth(int threads, std::size_t array_bytes) {
  threads = std::max(1, threads);
  const std::size_t n = std::max<std::size_t>(array_bytes / sizeof(float), 1024);
  const std::unique_ptr<float[]> src(new float[n]);
  const std::unique_ptr<float[]> dst(new float[n]);
  const std::size_t per = (n + static_cast<std::size_t>(threads) - 1) / static_cast<std::size_t>(threads);
  const auto slice = [&](int t, std::size_t& begin, std::size_t& count) {
    begin = std::min(n, per * static_cast<std::size_t>(t));
    count = std::min(n, begin + per) - begin;
  };
  // First touch by the thread that later copies the slice (pages faulted outside the timing).
  timed_parallel(threads, [&](int t) {
    std::size_t b = 0;
    std::size_t c = 0;
    slice(t, b, c);
    std::fill(src.get() + b, src.get() + b + c, 1.0F);
    std::fill(dst.get() + b, dst.get() + b + c, 0.0F);
  });
  double best = 0.0;
  for (int trial = 0; trial < 5; ++trial) {
    const double seconds = timed_parallel(threads, [&](int t) {
      std::size_t b = 0;
      std::size_t c = 0;
      slice(t, b, c);
      copy_floats(src.get() + b, dst.get() + b, c);
    });
    best = std::max(best, 2.0 * static_cast<double>(n * sizeof(float)) / seconds / 1e9);
  }
  return {best, threads, n * sizeof(float)};
}

}  // namespace ka::profiler
