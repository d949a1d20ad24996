#include <ka/harness/detail/roofline.hpp>

#include <ka/core/error.hpp>
#include <ka/core/fingerprint.hpp>
#include <ka/core/thread_pool.hpp>
#include <ka/profiler/statistics.hpp>

#include <immintrin.h>

#include <algorithm>
#include <array>
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

// Note [Read probe patterns]
// A GEMV reads its matrix as several row streams at once (ka's skinny passes read 8 or 32
// rows of B, BLIS's and oneDNN's GEMVs a few columns at a time), and one sequential stream is
// not the fastest way one core can read: on some CPUs several interleaved streams, each
// prefetched ahead, read markedly faster (figures in commit 4de7912's body). A roofline
// drawn with a one-stream figure then puts the GEMVs that read that way above 100 % of it, and
// the roofline is a bound only if nothing beats it. So the probe times each pattern below
// over every 1 MiB block and reports the best median, and which pattern gave it. Each step
// reads 256 bytes (32 words) of every stream.
struct ReadPattern {
  const char* name;
  int streams;
  bool prefetch;  // each stream 1 KiB ahead
};
constexpr std::array<ReadPattern, kReadPatterns> kPatterns = {{
    {"1 stream", 1, false},
    {"4 interleaved streams", 4, false},
    {"8 interleaved streams, prefetched 1 KiB ahead", 8, true},
}};
constexpr std::size_t kStep = 32;            // words per stream per step
constexpr std::size_t kPrefetchWords = 128;  // 1 KiB

inline void prefetch_step(const std::uint64_t* q) {
  for (std::size_t w = 0; w < kStep; w += 8) __builtin_prefetch(q + kPrefetchWords + w, 0, 3);
}

// 64-bit integer adds in eight independent chains: the compiler vectorises them and the loop
// is limited by the loads alone (float sums would be held back by add latency, not memory).
// `n` is a multiple of kStep x streams here and below.
std::uint64_t sum_words(const std::uint64_t* p, std::size_t n, const ReadPattern& pat) {
  const std::size_t len = n / static_cast<std::size_t>(pat.streams);
  std::uint64_t acc[kChains] = {};
  for (std::size_t i = 0; i < len; i += kStep) {
    for (int s = 0; s < pat.streams; ++s) {
      const std::uint64_t* q = p + static_cast<std::size_t>(s) * len + i;
      if (pat.prefetch) prefetch_step(q);
      for (std::size_t j = 0; j < kStep; j += kChains) {
        for (std::size_t c = 0; c < kChains; ++c) acc[c] += q[j + c];
      }
    }
  }
  std::uint64_t total = 0;
  for (const std::uint64_t a : acc) total += a;
  return total;
}

// The widest loads read faster, as tuned GEMVs do: one thread on this VM summed at 28-31 GB/s
// with the baseline's 16-byte loads and at 33-36 GB/s with 64-byte ones in the same run.
__attribute__((target("avx2"))) std::uint64_t sum_words_avx2(const std::uint64_t* p,
                                                             std::size_t n,
                                                             const ReadPattern& pat) {
  const std::size_t len = n / static_cast<std::size_t>(pat.streams);
  __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                    _mm256_setzero_si256()};
  for (std::size_t i = 0; i < len; i += kStep) {
    for (int s = 0; s < pat.streams; ++s) {
      const std::uint64_t* q = p + static_cast<std::size_t>(s) * len + i;
      if (pat.prefetch) prefetch_step(q);
      for (std::size_t v = 0; v < 8; ++v) {
        acc[v % 4] = _mm256_add_epi64(
            acc[v % 4], _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 4 * v)));
      }
    }
  }
  alignas(32) std::uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(acc[0], acc[1]),
                                      _mm256_add_epi64(acc[2], acc[3])));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

__attribute__((target("avx512f"))) std::uint64_t sum_words_avx512(const std::uint64_t* p,
                                                                  std::size_t n,
                                                                  const ReadPattern& pat) {
  const std::size_t len = n / static_cast<std::size_t>(pat.streams);
  __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                    _mm512_setzero_si512()};
  for (std::size_t i = 0; i < len; i += kStep) {
    for (int s = 0; s < pat.streams; ++s) {
      const std::uint64_t* q = p + static_cast<std::size_t>(s) * len + i;
      if (pat.prefetch) prefetch_step(q);
      for (std::size_t v = 0; v < 4; ++v) {
        acc[v] = _mm512_add_epi64(acc[v], _mm512_load_si512(q + 8 * v));
      }
    }
  }
  alignas(64) std::uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(acc[0], acc[1]),
                                             _mm512_add_epi64(acc[2], acc[3])));
  std::uint64_t total = 0;
  for (const std::uint64_t lane : lanes) total += lane;
  return total;
}

using SumFn = std::uint64_t (*)(const std::uint64_t*, std::size_t, const ReadPattern&);

// The loads of `isa` ("avx512", "avx2"; anything else: the baseline's).
SumFn sum_for(const std::string& isa) {
  if (isa == "avx512") return sum_words_avx512;
  if (isa == "avx2") return sum_words_avx2;
  return sum_words;
}

SumFn widest_sum() { return sum_for(cpu_isa_level()); }

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
  std::size_t block_words = kWords;
  std::size_t passes = 1;  // reads of each block per timed pass
  std::unique_ptr<std::uint64_t, Free> data;

  std::size_t array_bytes() const { return blocks * block_words * sizeof(std::uint64_t); }

  // Runs fn(block) over every block on the probe's threads; returns the wall seconds.
  template <typename Fn>
  double over_blocks(const Fn& fn) const {
    const auto t0 = std::chrono::steady_clock::now();
    ThreadPool::global().parallel_for(static_cast<std::int64_t>(blocks), threads,
                                      [&](std::int64_t b) {
                                        fn(data.get() + static_cast<std::size_t>(b) * block_words);
                                      });
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

// Note [Arrays smaller than a block]
// A per-case probe reads an array the size of the case's B (Note [Per-case read probes] in
// bench.cpp), which may be far below 1 MiB. Such an array is one block of its own size, rounded
// up to whole steps of the widest pattern (8 streams x 32 words = 2 KiB), and a timed pass reads
// it again and again until it has read kMinPassBytes, so the thread pool's start and the clock
// do not dominate a pass of a few microseconds. Reading it again is what the case does too.
constexpr std::size_t kStepBytes =
    kStep * sizeof(std::uint64_t) * static_cast<std::size_t>(kPatterns.back().streams);
constexpr std::size_t kMinPassBytes = std::size_t{32} << 20;

ReadProbe::ReadProbe(int threads, std::size_t array_bytes) : impl_(std::make_unique<Impl>()) {
  if (array_bytes == 0) {
    const auto l3 = static_cast<std::size_t>(std::max<std::int64_t>(0, cpu_fingerprint().l3_bytes));
    array_bytes = std::clamp(4 * l3, std::size_t{128} << 20, std::size_t{1} << 30);
  }
  Impl& p = *impl_;
  p.threads = std::max(1, threads);
  const std::size_t steps = (std::max(array_bytes, kStepBytes) + kStepBytes - 1) / kStepBytes;
  const std::size_t block_bytes = std::min(kBlock, steps * kStepBytes);
  p.block_words = block_bytes / sizeof(std::uint64_t);
  p.blocks = (steps * kStepBytes + block_bytes - 1) / block_bytes;
  p.passes = std::max<std::size_t>(1, kMinPassBytes / p.array_bytes());
  p.data.reset(static_cast<std::uint64_t*>(std::aligned_alloc(64, p.array_bytes())));
  if (p.data == nullptr) throw std::bad_alloc();
  // First touch by the threads that read, so the pages are mapped before any timing.
  const std::size_t touch = p.block_words * sizeof(std::uint64_t);
  p.over_blocks([touch](std::uint64_t* block) { std::memset(block, 1, touch); });
}

ReadProbe::~ReadProbe() = default;

ReadBandwidth ReadProbe::measure(int rounds) {
  const Impl& p = *impl_;
  auto pass = [&](const ReadPattern& pat) {
    return p.over_blocks([&](const std::uint64_t* block) {
      std::uint64_t sum = 0;
      for (std::size_t i = 0; i < p.passes; ++i) sum += p.sum(block, p.block_words, pat);
      g_sink.fetch_add(sum, std::memory_order_relaxed);
    });
  };
  pass(kPatterns[0]);
  const std::size_t bytes = p.array_bytes() * p.passes;
  // Rounds interleave the patterns, so drift meets each of them (Note [Read probe patterns]).
  std::array<std::vector<double>, kReadPatterns> gbps;
  for (int r = 0; r < std::max(1, rounds); ++r) {
    for (std::size_t k = 0; k < kPatterns.size(); ++k) {
      gbps[k].push_back(static_cast<double>(bytes) / pass(kPatterns[k]) / 1e9);
    }
  }
  ReadBandwidth best{0.0, p.threads, p.array_bytes(), std::max(1, rounds), ""};
  for (std::size_t k = 0; k < kPatterns.size(); ++k) {
    const double median = profiler::summarize(gbps[k]).median;
    if (median > best.gbytes_per_s) {
      best.gbytes_per_s = median;
      best.pattern = kPatterns[k].name;
    }
  }
  return best;
}

std::uint64_t read_pattern_sum(int pattern, const std::uint64_t* block, std::size_t words,
                               const std::string& isa) {
  KA_CHECK(pattern >= 0 && pattern < kReadPatterns, "read pattern ", pattern, " out of range");
  const ReadPattern& pat = kPatterns[static_cast<std::size_t>(pattern)];
  KA_CHECK(words % (kStep * static_cast<std::size_t>(pat.streams)) == 0, "read pattern '",
           pat.name, "' reads ", kStep * static_cast<std::size_t>(pat.streams),
           " words per step; ", words, " is not a multiple");
  const std::string host = cpu_isa_level();
  KA_CHECK(isa == "generic" || isa == host || (isa == "avx2" && host == "avx512"), "read pattern '",
           pat.name, "' with ", isa, " loads: this CPU supports only ", host);
  return sum_for(isa)(block, words, pat);
}

const char* read_pattern_name(int pattern) {
  KA_CHECK(pattern >= 0 && pattern < kReadPatterns, "read pattern ", pattern, " out of range");
  return kPatterns[static_cast<std::size_t>(pattern)].name;
}

double b_bytes(std::int64_t k, std::int64_t n) {
  return 4.0 * static_cast<double>(k) * static_cast<double>(n);
}

double decode_roofline_gflops(double fma_peak_gflops, double read_gbps, std::int64_t m) {
  if (fma_peak_gflops <= 0.0 || read_gbps <= 0.0) return 0.0;
  return std::min(fma_peak_gflops, read_gbps * static_cast<double>(m) / 2.0);
}

}  // namespace ka::harness::detail
