#include "fma_loop.hpp"
#include "timed_parallel.hpp"

#include <ka/core/fingerprint.hpp>
#include <ka/profiler/peak_probe.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>

namespace ka::profiler {
namespace detail {

float fma_loop_generic(std::int64_t iterations) {
  float acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = static_cast<float>(i) * 1e-3F;
  for (std::int64_t it = 0; it < iterations; ++it) {
    for (auto& a : acc) a = a * 0.999999F + 1e-7F;
  }
  float total = 0.0F;
  for (const float a : acc) total += a;
  return total;
}

}  // namespace detail

namespace {

using Clock = std::chrono::steady_clock;

struct Loop {
  float (*fn)(std::int64_t);
  double flop_per_iteration;
  const char* isa;
};

Loop pick_loop() {
  const std::string isa = cpu_isa_level();
  if (isa == "avx512") return {detail::fma_loop_avx512, 12.0 * 16 * 2, "avx512"};
  if (isa == "avx2") return {detail::fma_loop_avx2, 12.0 * 8 * 2, "avx2"};
  return {detail::fma_loop_generic, 12.0 * 2, "generic"};
}

std::atomic<float> g_sink{0.0F};

}  // namespace

PeakMeasurement measure_fma_peak(int threads, std::chrono::milliseconds duration) {
  const Loop loop = pick_loop();
  threads = std::max(1, threads);
  // Calibrate the iteration count on one thread so each trial lasts about `duration`.
  std::int64_t iterations = 1 << 16;
  while (true) {
    const auto t0 = Clock::now();
    g_sink.store(loop.fn(iterations), std::memory_order_relaxed);
    const auto elapsed = Clock::now() - t0;
    if (elapsed >= duration / 4 || iterations > (std::int64_t{1} << 40)) {
      const double scale = std::chrono::duration<double>(duration).count() /
                           std::max(1e-9, std::chrono::duration<double>(elapsed).count());
      iterations = std::max<std::int64_t>(1, static_cast<std::int64_t>(
                                                 static_cast<double>(iterations) * scale));
      break;
    }
    iterations *= 2;
  }

  double best = 0.0;
  for (int trial = 0; trial < 3; ++trial) {
    const double seconds = detail::timed_parallel(threads, [&](int) {
      g_sink.store(loop.fn(iterations), std::memory_order_relaxed);
    });
    const double flop = loop.flop_per_iteration * static_cast<double>(iterations) * threads;
    best = std::max(best, flop / seconds / 1e9);
  }
  return {best, threads, loop.isa};
}

}  // namespace ka::profiler
