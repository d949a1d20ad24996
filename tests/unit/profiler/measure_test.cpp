#include <ka/core/error.hpp>
#include <ka/profiler/measure.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

namespace ka::profiler {
namespace {

using Clock = std::chrono::steady_clock;

// Busy-waits for `us` microseconds: a function of known duration that, unlike sleep, does not
// depend on the scheduler's wake-up latency.
void spin_us(int us) {
  const auto until = Clock::now() + std::chrono::microseconds(us);
  while (Clock::now() < until) {
  }
}

TEST(Measure, KnownDurationStopsWhenCiTargetMet) {
  MeasureOptions o;
  o.target_rel_ci95 = 0.2;  // Loose, so a noisy shared machine still meets it at once.
  o.min_repetitions = 5;
  o.budget_s = 2.0;
  const Measurement m = measure([] { spin_us(200); }, o);
  EXPECT_EQ(m.stop, StopReason::kCiTargetMet) << m.str();
  EXPECT_TRUE(m.ci_target_met());
  EXPECT_GE(m.repetitions(), 5U);
  EXPECT_LT(m.repetitions(), 200U) << m.str();
  EXPECT_EQ(m.batch, 1) << "a 200 us call needs no batching";
  EXPECT_GE(m.summary.min, 200e3);
  EXPECT_LT(m.summary.median, 400e3) << m.str();
  EXPECT_LE(m.rel_ci95(), 0.2);
  EXPECT_EQ(m.mode, CacheMode::kHot);
  EXPECT_EQ(m.flushes, 0);
}

TEST(Measure, BudgetEndsSampling) {
  MeasureOptions o;
  o.target_rel_ci95 = 1e-3;  // Unreachable: half the calls take 10% longer.
  o.budget_s = 0.05;
  o.max_repetitions = 100000;
  int calls = 0;
  const auto start = Clock::now();
  const Measurement m = measure([&] { spin_us(++calls % 2 == 0 ? 1000 : 1100); }, o);
  const double wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(m.stop, StopReason::kBudget) << m.str();
  EXPECT_FALSE(m.ci_target_met());
  EXPECT_GE(m.repetitions(), 10U);
  EXPECT_LE(m.repetitions(), 60U);
  // The budget is checked after each sample, so at most one sample (1 ms) overshoots it;
  // allow for a descheduled thread on a busy machine.
  EXPECT_LT(wall_s, 0.05 + 0.1);
  EXPECT_NE(m.str().find("budget ended"), std::string::npos) << m.str();
}

TEST(Measure, MaxRepetitionsCapsSampling) {
  MeasureOptions o;
  o.target_rel_ci95 = 1e-3;  // Unreachable: half the calls take 50% longer.
  o.min_repetitions = 3;
  o.max_repetitions = 7;
  o.budget_s = 10.0;
  o.batch = 1;
  int calls = 0;
  const Measurement m = measure([&] { spin_us(++calls % 2 == 0 ? 20 : 30); }, o);
  EXPECT_EQ(m.stop, StopReason::kMaxRepetitions);
  EXPECT_EQ(m.repetitions(), 7U);
  EXPECT_EQ(calls, m.warmup_runs + 7);
}

TEST(Measure, WarmupCountAndTime) {
  MeasureOptions o;
  o.warmup_runs = 3;
  o.batch = 1;
  o.max_repetitions = 5;
  o.min_repetitions = 5;
  o.target_rel_ci95 = 1e-12;
  int calls = 0;
  Measurement m = measure([&] { ++calls; }, o);
  EXPECT_EQ(m.warmup_runs, 3);
  EXPECT_EQ(calls, 3 + 5);

  // Warm-up is time as well as a count: with one call asked for and 10 ms, the warm-up lasts
  // at least 10 ms from the moment measure() is called (one 20 us call would end far sooner),
  // and no call starts after the 10 ms have passed. Timed by the calls themselves, so a slow
  // or busy host changes how many calls fit, not the outcome. measure()'s clock starts before
  // its first call, by however long a sanitizer makes that take: the lower bound is taken
  // from before the call, the upper from the first call's start.
  o.warmup_runs = 1;
  o.warmup_s = 0.01;
  Clock::time_point first_start;
  std::vector<Clock::time_point> ends;
  const Clock::time_point before = Clock::now();
  const Measurement timed = measure(
      [&] {
        if (ends.empty()) first_start = Clock::now();
        spin_us(20);
        ends.push_back(Clock::now());
      },
      o);
  const auto w = static_cast<std::size_t>(timed.warmup_runs);
  ASSERT_GE(w, 1U);
  ASSERT_GE(ends.size(), w);
  EXPECT_GE(ends[w - 1] - before, std::chrono::milliseconds(10)) << w << " warm-up calls";
  if (w >= 2) {
    EXPECT_LT(ends[w - 2] - first_start, std::chrono::milliseconds(10)) << w << " warm-up calls";
  }
}

TEST(Measure, TinyFunctionIsBatched) {
  MeasureOptions o;
  o.max_repetitions = 20;
  o.budget_s = 1.0;
  volatile std::uint64_t counter = 0;
  const Measurement m = measure([&] { counter = counter + 1; }, o);
  EXPECT_GT(m.batch, 100) << m.str();
  // A sample (batch calls) lasts about min_sample_s or more.
  EXPECT_GT(m.summary.median * m.batch, 0.5 * o.min_sample_s * 1e9) << m.str();
  EXPECT_NE(m.str().find("calls/sample"), std::string::npos);
}

TEST(Measure, ColdModeFlushesBeforeEveryCall) {
  MeasureOptions o;
  o.mode = CacheMode::kCold;
  o.min_repetitions = 4;
  o.max_repetitions = 4;
  o.target_rel_ci95 = 1e-12;
  o.flush_bytes = 1 << 20;
  o.batch = 8;  // Ignored: cold samples are single calls.
  const Measurement m = measure([] {}, o);
  EXPECT_EQ(m.batch, 1);
  EXPECT_EQ(m.flushes, m.warmup_runs + 4);
  EXPECT_EQ(m.flush_bytes, 1 << 20);
  EXPECT_NE(m.str().find("cold"), std::string::npos);
  EXPECT_GE(default_flush_bytes(), std::int64_t{1} << 20);
}

TEST(Measure, ColdIsSlowerForCacheResidentWork) {
  // A pointer chase, one cache line per step, through a random cycle over 256 KiB: every load
  // waits for the one before, so neither the prefetcher nor out-of-order execution can overlap
  // the misses. Hot, each step is a cache hit (L2, or L3 where L2 is smaller); after a flush each
  // is a memory access, several times slower on any CPU and under a sanitizer's instrumentation.
  // Independent loads would not do: enough misses overlap to hide the memory latency entirely.
  constexpr std::uint32_t kLines = (256 << 10) / 64;
  constexpr std::uint32_t kStride = 64 / sizeof(std::uint32_t);
  std::vector<std::uint32_t> order(kLines);
  std::iota(order.begin(), order.end(), 0U);
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  std::vector<std::uint32_t> next(std::size_t{kLines} * kStride, 0);
  for (std::uint32_t i = 0; i < kLines; ++i)
    next[std::size_t{order[i]} * kStride] = order[(i + 1) % kLines];
  volatile std::uint32_t sink = 0;
  auto work = [&] {
    std::uint32_t line = order[0];
    for (std::uint32_t step = 0; step < kLines; ++step) line = next[std::size_t{line} * kStride];
    sink = line;
  };
  MeasureOptions o;
  o.min_repetitions = 9;
  o.max_repetitions = 9;
  o.target_rel_ci95 = 1e-12;
  o.budget_s = 2.0;
  o.batch = 1;
  const Measurement hot = measure(work, o);
  o.mode = CacheMode::kCold;
  const Measurement cold = measure(work, o);
  // The fastest call of each: interference only adds time, and every cold call misses.
  EXPECT_GT(cold.summary.min, 2 * hot.summary.min)
      << "hot: " << hot.str() << "\ncold: " << cold.str();
}

TEST(Measure, MedianIntervalIgnoresHeavyTails) {
  // Every 5th call is descheduled-slow (20x). The median's interval tightens regardless; the
  // mean's stays wide: at 200 calls its relative half-width is still about 0.2. The cap leaves
  // the median room on a host (or under a sanitizer) that makes the fast calls jitter too.
  int calls = 0;
  auto fn = [&] { spin_us(++calls % 5 == 0 ? 1000 : 50); };
  MeasureOptions o;
  o.batch = 1;
  o.warmup_runs = 0;
  o.min_repetitions = 6;
  o.max_repetitions = 200;
  o.target_rel_ci95 = 0.05;
  o.budget_s = 2.0;
  const Measurement by_median = measure(fn, o);
  EXPECT_EQ(by_median.stop, StopReason::kCiTargetMet) << by_median.str();
  EXPECT_EQ(by_median.ci_of, CiOf::kMedian);
  EXPECT_LT(by_median.median_ci95.high, 500e3) << by_median.str();
  EXPECT_GE(by_median.outliers.high, 1U) << by_median.str();

  calls = 0;
  o.ci_of = CiOf::kMean;
  const Measurement by_mean = measure(fn, o);
  EXPECT_EQ(by_mean.stop, StopReason::kMaxRepetitions) << by_mean.str();
  EXPECT_NE(by_mean.str().find("of mean"), std::string::npos) << by_mean.str();
}

TEST(Measure, RejectsInconsistentOptions) {
  auto fn = [] {};
  MeasureOptions o;
  o.min_repetitions = 10;
  o.max_repetitions = 5;
  EXPECT_THROW(measure(fn, o), ValueError);
  o = MeasureOptions{};
  o.target_rel_ci95 = 0;
  EXPECT_THROW(measure(fn, o), ValueError);
  o = MeasureOptions{};
  o.budget_s = -1;
  EXPECT_THROW(measure(fn, o), ValueError);
  EXPECT_THROW(measure(std::function<void()>{}, MeasureOptions{}), ValueError);
}

TEST(Measure, ExceptionsFromTheFunctionPropagate) {
  EXPECT_THROW(measure([] { throw std::runtime_error("boom"); }), std::runtime_error);
}

TEST(Measure, StrSaysWhatTheNumbersAre) {
  Measurement m;
  m.samples_ns = {1000, 1010, 990, 1000, 5000};
  m.summary = summarize(m.samples_ns);
  m.outliers = tukey_outliers(m.samples_ns);
  m.stop = StopReason::kCiTargetMet;
  m.target_rel_ci95 = 0.01;
  const std::string s = m.str();
  EXPECT_NE(s.find("1.00 us median of 5 (hot, 1 call/sample)"), std::string::npos) << s;
  EXPECT_NE(s.find("CI95 ±0% of median"), std::string::npos) << s;
  EXPECT_NE(s.find("target 1%: met"), std::string::npos) << s;
  EXPECT_NE(s.find("1 outlier"), std::string::npos) << s;
  m.median_ci95 = median_ci95(std::vector<double>{990, 1000, 1000, 1010, 5000});
  EXPECT_NE(m.str().find("CI95 of median unknown (needs 6 samples)"), std::string::npos)
      << m.str();
  m.ci_of = CiOf::kMean;
  EXPECT_NE(m.str().find(" of mean (target"), std::string::npos) << m.str();
  EXPECT_EQ(Measurement{}.str(), "no samples");
}

TEST(Measure, FormatDuration) {
  EXPECT_EQ(format_duration_ns(840), "840 ns");
  EXPECT_EQ(format_duration_ns(12345), "12.3 us");
  EXPECT_EQ(format_duration_ns(1.52e6), "1.52 ms");
  EXPECT_EQ(format_duration_ns(2.01e9), "2.01 s");
}

TEST(Outliers, TukeyFences) {
  // Sorted: -20, 1..10, 100. Q1 = 2.75, Q3 = 8.25 (type 7), IQR 5.5: fences -5.5 and 16.5.
  const Outliers o = tukey_outliers({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100, -20});
  EXPECT_EQ(o.high, 1U);
  EXPECT_EQ(o.low, 1U);
  EXPECT_EQ(o.total(), 2U);
  EXPECT_DOUBLE_EQ(o.lower_fence, -5.5);
  EXPECT_DOUBLE_EQ(o.upper_fence, 16.5);
  EXPECT_EQ(tukey_outliers({1, 2, 1000}).total(), 0U) << "too few samples to call outliers";
  EXPECT_EQ(tukey_outliers({5, 5, 5, 5, 5}).total(), 0U);
}

TEST(Outliers, MedianInterval) {
  std::vector<double> v = {1, 2, 3, 4, 5};
  EXPECT_TRUE(std::isinf(median_ci95(v).half_width())) << "no 95% interval from 5 samples";
  v.push_back(6);
  // n = 6: [x_(1), x_(6)] covers with 1 - 2/64 = 96.9%; [x_(2), x_(5)] only 78%.
  EXPECT_DOUBLE_EQ(median_ci95(v).low, 1);
  EXPECT_DOUBLE_EQ(median_ci95(v).high, 6);
  std::vector<double> big(100);
  std::iota(big.begin(), big.end(), 1.0);
  // n = 100: the textbook ranks are 40 and 61.
  EXPECT_DOUBLE_EQ(median_ci95(big).low, 40);
  EXPECT_DOUBLE_EQ(median_ci95(big).high, 61);
  std::vector<double> huge(100000, 3.0);
  EXPECT_DOUBLE_EQ(median_ci95(huge).half_width(), 0.0) << "large n must not underflow";
  EXPECT_THROW(median_ci95({}), ValueError);
}

TEST(Outliers, Quantiles) {
  const std::vector<double> v = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(quantile_sorted(v, 0.0), 1);
  EXPECT_DOUBLE_EQ(quantile_sorted(v, 1.0), 4);
  EXPECT_DOUBLE_EQ(quantile_sorted(v, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(quantile_sorted(v, 0.25), 1.75);
  EXPECT_THROW(quantile_sorted({}, 0.5), ValueError);
  EXPECT_THROW(quantile_sorted(v, 1.5), ValueError);
}

}  // namespace
}  // namespace ka::profiler
