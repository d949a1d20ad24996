#include <ka/core/error.hpp>
#include <ka/profiler/peak_probe.hpp>
#include <ka/profiler/statistics.hpp>

#include <gtest/gtest.h>

#include <algorithm>

#include <chrono>
#include <cmath>

namespace ka::profiler {
namespace {

TEST(Statistics, KnownSample) {
  // mean 5, sample variance 32/7, median 4.5
  const Summary s = summarize({2, 4, 4, 4, 5, 5, 7, 9});
  EXPECT_EQ(s.count, 8U);
  EXPECT_DOUBLE_EQ(s.min, 2);
  EXPECT_DOUBLE_EQ(s.max, 9);
  EXPECT_DOUBLE_EQ(s.mean, 5);
  EXPECT_DOUBLE_EQ(s.median, 4.5);
  EXPECT_NEAR(s.stddev, std::sqrt(32.0 / 7.0), 1e-12);
  EXPECT_NEAR(s.ci95_half_width, 2.365 * std::sqrt(32.0 / 7.0) / std::sqrt(8.0), 1e-9);
  EXPECT_NEAR(s.cv(), std::sqrt(32.0 / 7.0) / 5.0, 1e-12);
}

TEST(Statistics, OddCountMedianAndSingleSample) {
  EXPECT_DOUBLE_EQ(summarize({3, 1, 2}).median, 2);
  const Summary one = summarize({7});
  EXPECT_DOUBLE_EQ(one.median, 7);
  EXPECT_DOUBLE_EQ(one.stddev, 0);
  EXPECT_DOUBLE_EQ(one.ci95_half_width, 0);
  EXPECT_THROW(summarize({}), ValueError);
}

TEST(Statistics, StudentT) {
  EXPECT_DOUBLE_EQ(student_t95(1), 12.706);
  EXPECT_DOUBLE_EQ(student_t95(30), 2.042);
  EXPECT_NEAR(student_t95(1000), 1.962, 1e-3);
  EXPECT_THROW(student_t95(0), ValueError);
}

TEST(PeakProbe, MeasuresAPlausibleFigure) {
  const PeakMeasurement p = measure_fma_peak(1, std::chrono::milliseconds(10));
  EXPECT_EQ(p.threads, 1);
  EXPECT_FALSE(p.isa.empty());
  // Any x86-64 core of the last 15 years does between 2 and 1000 fp32 GFLOP/s.
  EXPECT_GT(p.gflops, 2.0);
  EXPECT_LT(p.gflops, 1000.0);
}

TEST(BandwidthProbe, CopyBandwidthIsPlausibleAndBoundedByTheCopyItself) {
  // 16 MiB arrays: small enough for a quick test; the figure may include cache effects.
  const std::size_t bytes = std::size_t{16} << 20;
  const auto t0 = std::chrono::steady_clock::now();
  const BandwidthMeasurement b = measure_copy_bandwidth(1, bytes);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(b.threads, 1);
  EXPECT_EQ(b.array_bytes, bytes);
  // Fifteen timed copies (five of each kind) of 2 x 16 MiB each, plus the first touch, took
  // `elapsed`: the best copy cannot have been slower than the average of everything.
  EXPECT_GE(b.gbytes_per_s, 15 * 2.0 * static_cast<double>(bytes) / elapsed / 1e9 * 0.99);
  EXPECT_GT(b.ordinary_gbps, 0.0);
  EXPECT_GT(b.streaming_gbps, 0.0);
  EXPECT_GT(b.pooled_gbps, 0.0);
  EXPECT_DOUBLE_EQ(b.gbytes_per_s, std::max({b.ordinary_gbps, b.streaming_gbps, b.pooled_gbps}));
  // Any machine this runs on copies between 0.5 and 2000 GB/s.
  EXPECT_GT(b.gbytes_per_s, 0.5);
  EXPECT_LT(b.gbytes_per_s, 2000.0);
}

// The kept-arrays probe ka-bench brackets each timing with: slices of whole lines per thread,
// the same figures' shape, and measured again and again on the same arrays.
TEST(BandwidthProbe, CopyProbeKeepsItsArraysAndMeasuresRepeatedly) {
  const std::size_t bytes = (std::size_t{4} << 20) + 100;  // not a multiple of 2 x 64 bytes
  CopyProbe probe(2, bytes);
  EXPECT_LE(probe.array_bytes(), bytes);
  EXPECT_GT(probe.array_bytes(), bytes - 2 * 64);
  EXPECT_EQ(probe.array_bytes() % (2 * 64), 0U);
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const BandwidthMeasurement b = probe.measure(1);
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(b.threads, 2);
    EXPECT_EQ(b.array_bytes, probe.array_bytes());
    EXPECT_DOUBLE_EQ(b.gbytes_per_s,
                     std::max({b.ordinary_gbps, b.streaming_gbps, b.pooled_gbps}));
    // Three copies (no first touch this time) took `elapsed`: the best was at least as fast.
    EXPECT_GE(b.gbytes_per_s, 3 * 2.0 * static_cast<double>(b.array_bytes) / elapsed / 1e9 * 0.99);
    EXPECT_LT(b.gbytes_per_s, 5000.0);
  }
}

}  // namespace
}  // namespace ka::profiler
