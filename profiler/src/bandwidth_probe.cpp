// The copy-bandwidth probe (STREAM "Copy"), with ordinary stores and with streaming
// (non-temporal) stores, plain and in blocks on ka's thread pool; the machine's copy bandwidth
// is the best of the three. Compiled with
// -fno-tree-loop-distribute-patterns so the ordinary loop stays a loop of loads and stores
// instead of becoming a memcpy call.
#include "timed_parallel.hpp"

#include <ka/core/ceil_div.hpp>
#include <ka/core/fingerprint.hpp>
#include <ka/core/thread_pool.hpp>
#include <ka/profiler/peak_probe.hpp>

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

namespace ka::profiler {
namespace {

void copy_floats(const float* __restrict src, float* __restrict dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = src[i];
}

// Whole-line streaming stores (the arrays are 64-byte aligned and n a multiple of 16).
__attribute__((target("avx512f"))) void stream_floats_avx512(const float* src, float* dst,
                                                             std::size_t n) {
  for (std::size_t i = 0; i + 16 <= n; i += 16) _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
  _mm_sfence();
}

void stream_floats_sse(const float* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
  _mm_sfence();
}

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};

}  // namespace

struct CopyProbe::Impl {
  int threads = 1;
  std::size_t per = 0;  // floats per thread, a multiple of 16
  std::unique_ptr<float, AlignedFree> src;
  std::unique_ptr<float, AlignedFree> dst;

  [[nodiscard]] std::size_t n() const { return per * static_cast<std::size_t>(threads); }

  double best_gbps(void (*copy)(const float*, float*, std::size_t), int trials) const {
    double best = 0.0;
    for (int trial = 0; trial < trials; ++trial) {
      const double seconds = detail::timed_parallel(threads, [&](int t) {
        const std::size_t b = per * static_cast<std::size_t>(t);
        copy(src.get() + b, dst.get() + b, per);
      });
      best = std::max(best, 2.0 * static_cast<double>(n() * sizeof(float)) / seconds / 1e9);
    }
    return best;
  }

  // The streaming copy the way ka's kernels run: 256 KiB blocks handed out by the global
  // thread pool (already running threads, blocks interleaved between them).
  double best_pooled_gbps(void (*copy)(const float*, float*, std::size_t), int trials) const {
    constexpr std::size_t kBlock = std::size_t{1} << 16;  // floats
    const std::size_t total = n();
    const auto blocks = static_cast<std::int64_t>(ceil_div(total, kBlock));
    double best = 0.0;
    for (int trial = 0; trial < trials; ++trial) {
      const auto t0 = std::chrono::steady_clock::now();
      ThreadPool::global().parallel_for(blocks, threads, [&](std::int64_t b) {
        const std::size_t begin = static_cast<std::size_t>(b) * kBlock;
        copy(src.get() + begin, dst.get() + begin, std::min(kBlock, total - begin));
      });
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::max(best, 2.0 * static_cast<double>(total * sizeof(float)) / seconds / 1e9);
    }
    return best;
  }
};

CopyProbe::CopyProbe(int threads, std::size_t array_bytes) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.threads = std::max(1, threads);
  // Slices of whole 64-byte lines, so the streaming loops need no edges.
  s.per = std::max<std::size_t>(
      array_bytes / sizeof(float) / static_cast<std::size_t>(s.threads) / 16 * 16, 16);
  s.src.reset(static_cast<float*>(std::aligned_alloc(64, s.n() * sizeof(float))));
  s.dst.reset(static_cast<float*>(std::aligned_alloc(64, s.n() * sizeof(float))));
  if (!s.src || !s.dst) throw std::bad_alloc();
  // First touch by the thread that later copies the slice (pages faulted outside the timing).
  detail::timed_parallel(s.threads, [&](int t) {
    const std::size_t b = s.per * static_cast<std::size_t>(t);
    std::fill(s.src.get() + b, s.src.get() + b + s.per, 1.0F);
    std::fill(s.dst.get() + b, s.dst.get() + b + s.per, 0.0F);
  });
}

CopyProbe::~CopyProbe() = default;

std::size_t CopyProbe::array_bytes() const { return impl_->n() * sizeof(float); }

BandwidthMeasurement CopyProbe::measure(int trials) {
  const Impl& s = *impl_;
  trials = std::max(1, trials);
  const auto stream = cpu_isa_level() == "avx512" ? stream_floats_avx512 : stream_floats_sse;
  BandwidthMeasurement m;
  m.threads = s.threads;
  m.array_bytes = array_bytes();
  m.ordinary_gbps = s.best_gbps(copy_floats, trials);
  m.streaming_gbps = s.best_gbps(stream, trials);
  m.pooled_gbps = s.best_pooled_gbps(stream, trials);
  m.gbytes_per_s = std::max({m.ordinary_gbps, m.streaming_gbps, m.pooled_gbps});
  return m;
}

BandwidthMeasurement measure_copy_bandwidth(int threads, std::size_t array_bytes) {
  try {
    return CopyProbe(threads, array_bytes).measure(5);
  } catch (const std::bad_alloc&) {
    return {};
  }
}

}  // namespace ka::profiler
