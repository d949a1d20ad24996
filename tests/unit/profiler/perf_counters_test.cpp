#include <ka/profiler/perf_counters.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <utility>

namespace ka::profiler {
namespace {

std::uint64_t busy_work() {
  volatile std::uint64_t x = 1;
  for (int i = 0; i < 2000000; ++i) x = x * 3 + 1;
  return x;
}

TEST(PerfCounters, ValuesOrReasons) {
  PerfCounters counters;
  counters.start();
  busy_work();
  counters.stop();
  const std::vector<CounterValue> values = counters.read();
  ASSERT_EQ(values.size(), 3U);
  EXPECT_EQ(values[0].event, PerfEvent::kTaskClock);
  EXPECT_EQ(values[1].event, PerfEvent::kCycles);
  EXPECT_EQ(values[2].event, PerfEvent::kInstructions);
  for (const CounterValue& v : values) {
    if (v.available) {
      EXPECT_GT(v.value, 0U) << v.str();
      EXPECT_GT(v.running_fraction, 0.0);
      EXPECT_TRUE(v.unavailable_reason.empty());
      EXPECT_EQ(v.str().find("unavailable"), std::string::npos);
    } else {
      EXPECT_FALSE(v.unavailable_reason.empty());
      EXPECT_NE(v.str().find("unavailable ("), std::string::npos) << v.str();
    }
    std::cout << "  " << v.str() << '\n';
  }
  const CounterValue task = counters.read(PerfEvent::kTaskClock);
  if (task.available) {
    // Two million dependent multiply-adds take well over 100 us.
    EXPECT_GT(task.value, 100000U) << task.str();
    EXPECT_TRUE(counters.any_available());
  }
}

TEST(PerfCounters, StoppedCountersHoldStill) {
  PerfCounters counters({PerfEvent::kTaskClock});
  counters.start();
  busy_work();
  counters.stop();
  const CounterValue first = counters.read(PerfEvent::kTaskClock);
  busy_work();
  const CounterValue second = counters.read(PerfEvent::kTaskClock);
  if (!first.available) GTEST_SKIP() << "task-clock unavailable: " << first.unavailable_reason;
  EXPECT_EQ(first.value, second.value);
}

TEST(PerfCounters, UnrequestedEventAndMove) {
  PerfCounters counters({PerfEvent::kTaskClock});
  const CounterValue cycles = counters.read(PerfEvent::kCycles);
  EXPECT_FALSE(cycles.available);
  EXPECT_EQ(cycles.unavailable_reason, "not requested");
  PerfCounters moved(std::move(counters));
  moved.start();
  moved.stop();
  EXPECT_EQ(moved.read().size(), 1U);
  EXPECT_TRUE(counters.read().empty());  // NOLINT(bugprone-use-after-move): moved-from is empty
}

}  // namespace
}  // namespace ka::profiler
