#include "roofline.hpp"

#include <ka/core/fingerprint.hpp>
#include <ka/core/thread_pool.hpp>
#include <ka/profiler/statistics.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace ka::harness::detail {
namespace {

constexpr std::size_t kChains = 8;

// 64-bit integer adds in eight independent chains: the compiler vectorises them and the loop
// is limited by the loads alone (float sums would be held back by add latency, not memory).
// `n` is a multiple of kChains.
std::uint64_t sum_words(const std::uint64_t* p, std::size_t n) {
  std::uint64_t acc[kChains] = {};
  for (std::size_t i = 0; i < n; i += kChains) {
    for (std::size_t j = 0; j < kChains; ++j) acc[j] += p[i + j];
  }
  std::uint64_t total = 0;
  for (const std::uint64_t a : acc) total += a;
  return total;
}

std::atomic<std::uint64_t> g_sink{0};

struct Free {
  void operator()(std::uint64_t* p) const { std::free(p); }
};

}  // namespace

ReadBandwidth measure_read_bandwidth(int threads, std::size_t array_bytes, int rounds) {
  constexpr std::size_t kBlock = std::size_t{1} << 20;
  if (array_bytes == 0) {
    const auto l3 = static_cast<std::size_t>(std::max<std::int64_t>(0, cpu_fingerprint().l3_bytes));
    array_bytes = std::clamp(4 * l3, std::size_t{128} << 20, std::size_t{1} << 30);
  }
  const std::size_t blocks = std::max<std::size_t>(1, array_bytes / kBlock);
  array_bytes = blocks * kBlock;
  std::unique_ptr<std::uint64_t, Free> data(
      static_cast<std::uint64_t*>(std::aligned_alloc(64, array_bytes)));
  if (data == nullptr) throw std::bad_alloc();
  constexpr std::size_t kWords = kBlock / sizeof(std::uint64_t);
  auto& pool = ThreadPool::global();
  const auto n = static_cast<std::int64_t>(blocks);
  // First touch by the threads that read, so the pages are mapped before any timing.
  pool.parallel_for(n, threads, [&](std::int64_t b) {
    std::memset(data.get() + static_cast<std::size_t>(b) * kWords, 1, kBlock);
  });
  auto pass = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(n, threads, [&](std::int64_t b) {
      g_sink.fetch_add(sum_words(data.get() + static_cast<std::size_t>(b) * kWords, kWords),
                       std::memory_order_relaxed);
    });
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  pass();
  std::vector<double> gbps;
  for (int r = 0; r < std::max(1, rounds); ++r) {
    gbps.push_back(static_cast<double>(array_bytes) / pass() / 1e9);
  }
  const int measured = static_cast<int>(gbps.size());
  return {profiler::summarize(std::move(gbps)).median, threads, array_bytes, measured};
}

double b_bytes(std::int64_t k, std::int64_t n) {
  return 4.0 * static_cast<double>(k) * static_cast<double>(n);
}

double decode_roofline_gflops(double fma_peak_gflops, double read_gbps, std::int64_t m) {
  if (fma_peak_gflops <= 0.0 || read_gbps <= 0.0) return 0.0;
  return std::min(fma_peak_gflops, read_gbps * static_cast<double>(m) / 2.0);
}

}  // namespace ka::harness::detail
