// The copy-bandwidth probe (STREAM "Copy"), with ordinary stores and with streaming
// (non-temporal) stores; the machine's copy bandwidth is the better of the two. Compiled with
// -fno-tree-loop-distribute-patterns so the ordinary loop stays a loop of loads and stores
// instead of becoming a memcpy call.
#include "timed_parallel.hpp"

#include <ka/core/fingerprint.hpp>
#include <ka/profiler/peak_probe.hpp>

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>

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

BandwidthMeasurement measure_copy_bandwidth(int threads, std::size_t array_bytes) {
  threads = std::max(1, threads);
  // Slices of whole 64-byte lines, so the streaming loops need no edges.
  const std::size_t per = std::max<std::size_t>(array_bytes / sizeof(float) /
                                                    static_cast<std::size_t>(threads) / 16 * 16,
                                                16);
  const std::size_t n = per * static_cast<std::size_t>(threads);
  const std::unique_ptr<float, AlignedFree> src(
      static_cast<float*>(std::aligned_alloc(64, n * sizeof(float))));
  const std::unique_ptr<float, AlignedFree> dst(
      static_cast<float*>(std::aligned_alloc(64, n * sizeof(float))));
  if (!src || !dst) return {};
  // First touch by the thread that later copies the slice (pages faulted outside the timing).
  detail::timed_parallel(threads, [&](int t) {
    const std::size_t b = per * static_cast<std::size_t>(t);
    std::fill(src.get() + b, src.get() + b + per, 1.0F);
    std::fill(dst.get() + b, dst.get() + b + per, 0.0F);
  });
  const bool avx512 = cpu_isa_level() == "avx512";
  const auto best_of = [&](void (*copy)(const float*, float*, std::size_t)) {
    double best = 0.0;
    for (int trial = 0; trial < 5; ++trial) {
      const double seconds = detail::timed_parallel(threads, [&](int t) {
        const std::size_t b = per * static_cast<std::size_t>(t);
        copy(src.get() + b, dst.get() + b, per);
      });
      best = std::max(best, 2.0 * static_cast<double>(n * sizeof(float)) / seconds / 1e9);
    }
    return best;
  };
  BandwidthMeasurement m;
  m.threads = threads;
  m.array_bytes = n * sizeof(float);
  m.ordinary_gbps = best_of(copy_floats);
  m.streaming_gbps = best_of(avx512 ? stream_floats_avx512 : stream_floats_sse);
  m.gbytes_per_s = std::max(m.ordinary_gbps, m.streaming_gbps);
  return m;
}

}  // namespace ka::profiler
