#include <ka/harness/detail/roofline.hpp>

#include <ka/core/fingerprint.hpp>
#include <ka/core/thread_pool.hpp>
#include <ka/profiler/statistics.hpp>

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace ka::harness::detail {
namespace {

constexpr std::size_t kChains = 8;

// 64-bit integer adds in eight independent chains: the compiler vectorises them and the loop
// is limited by the loads alone (float sums would be held back by add latency, not memory).
// `n` is a multiple of 32 here and below.
std::uint64_t sum_words(const std::uint64_t* p, std::size_t n) {
  std::uint64_t acc[kChains] = {};
  for (std::size_t i = 0; i < n; i += kChains) {
    for (std::size_t j = 0; j < kChains; ++j) acc[j] += p[i + j];
  }
  std::uint64_t total = 0;
  for (const std::uint64_t a : acc) total += a;
  return total;
}

// The widest loads read faster, as tuned GEMVs do: one thread on this VM summed at 28-31 GB/s
// with the baseline's 16-byte loads and at 33-36 GB/s with 64-byte ones in the same run.
__attribute__((target("avx2"))) std::uint64_t sum_words_avx2(const std::uint64_t* p,
                                                             std::size_t n) {
  __m256i a0 = _mm256_setzero_si256();
  __m256i a1 = a0;
  __m256i a2 = a0;
  __m256i a3 = a0;
  for (std::size_t i = 0; i < n; i += 16) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  alignas(32) std::uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

__attribute__((target("avx512f"))) std::uint64_t sum_words_avx512(const std::uint64_t* p,
                                                                  std::size_t n) {
  __m512i a0 = _mm512_setzero_si512();
  __m512i a1 = a0;
  __m512i a2 = a0;
  __m512i a3 = a0;
  for (std::size_t i = 0; i < n; i += 32) {
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + i + 8));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + i + 16));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + i + 24));
  }
  alignas(64) std::uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  std::uint64_t total = 0;
  for (const std::uint64_t lane : lanes) total += lane;
  return total;
}

using SumFn = std::uint64_t (*)(const std::uint64_t*, std::size_t);

SumFn widest_sum() {
  const std::string isa = cpu_isa_level();
  if (isa == "avx512") return sum_words_avx512;
  if (isa == "avx2") return sum_words_avx2;
  return sum_words;
}

std::atomic<std::uint64_t> g_sink{0};

struct Free {
  void operator()(std::uint64_t* p) const { std::free(p); }
};

constexpr std::size_t kBlock = std::size_t{1} << 20;
constexpr std::size_t kWords = kBlock / sizeof(std::uint64_t);

}  // namespace

struct ReadProbe::Impl {
  SumFn sum = widest_sum();
  int threads = 1;
  std::size_t blocks = 0;
  std::unique_ptr<std::uint64_t, Free> data;

  // Runs fn(block) over every block on the probe's threads; returns the wall seconds.
  template <typename Fn>
  double over_blocks(const Fn& fn) const {
    const auto t0 = std::chrono::steady_clock::now();
    ThreadPool::global().parallel_for(static_cast<std::int64_t>(blocks), threads,
                                      [&](std::int64_t b) {
                                        fn(data.get() + static_cast<std::size_t>(b) * kWords);
                                      });
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

ReadProbe::ReadProbe(int threads, std::size_t array_bytes) : impl_(std::make_unique<Impl>()) {
  if (array_bytes == 0) {
    const auto l3 = static_cast<std::size_t>(std::max<std::int64_t>(0, cpu_fingerprint().l3_bytes));
    array_bytes = std::clamp(4 * l3, std::size_t{128} << 20, std::size_t{1} << 30);
  }
  impl_->threads = std::max(1, threads);
  impl_->blocks = std::max<std::size_t>(1, array_bytes / kBlock);
  impl_->data.reset(static_cast<std::uint64_t*>(std::aligned_alloc(64, impl_->blocks * kBlock)));
  if (impl_->data == nullptr) throw std::bad_alloc();
  // First touch by the threads that read, so the pages are mapped before any timing.
  impl_->over_blocks([](std::uint64_t* block) { std::memset(block, 1, kBlock); });
}

ReadProbe::~ReadProbe() = default;

ReadBandwidth ReadProbe::measure(int rounds) {
  const Impl& p = *impl_;
  auto pass = [&] {
    return p.over_blocks([&](const std::uint64_t* block) {
      g_sink.fetch_add(p.sum(block, kWords), std::memory_order_relaxed);
    });
  };
  pass();
  const std::size_t bytes = p.blocks * kBlock;
  std::vector<double> gbps;
  for (int r = 0; r < std::max(1, rounds); ++r) {
    gbps.push_back(static_cast<double>(bytes) / pass() / 1e9);
  }
  const int measured = static_cast<int>(gbps.size());
  return {profiler::summarize(std::move(gbps)).median, p.threads, bytes, measured};
}

double b_bytes(std::int64_t k, std::int64_t n) {
  return 4.0 * static_cast<double>(k) * static_cast<double>(n);
}

double decode_roofline_gflops(double fma_peak_gflops, double read_gbps, std::int64_t m) {
  if (fma_peak_gflops <= 0.0 || read_gbps <= 0.0) return 0.0;
  return std::min(fma_peak_gflops, read_gbps * static_cast<double>(m) / 2.0);
}

}  // namespace ka::harness::detail
