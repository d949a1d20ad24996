// RoundsReporter: ka-bench's interleaved rounds come back as repetitions with the aggregates
// Google Benchmark would print (Note [Interleaved rounds], harness/src/bench.cpp).
#include <ka/harness/detail/rounds_reporter.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace {

using ka::harness::detail::RoundsReporter;
using GbRun = benchmark::BenchmarkReporter::Run;

class Capture : public benchmark::BenchmarkReporter {
 public:
  explicit Capture(std::vector<GbRun>* seen) : seen_(seen) {}
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<GbRun>& runs) override {
    seen_->insert(seen_->end(), runs.begin(), runs.end());
  }
  void Finalize() override { ++finalized; }
  int finalized = 0;

 private:
  std::vector<GbRun>* seen_;
};

// One round of `name`: `calls` calls of `ms_per_call` milliseconds each (CPU time half that).
GbRun round_of(const std::string& name, double ms_per_call, benchmark::IterationCount calls) {
  GbRun r;
  r.run_name.function_name = name;
  r.run_name.time_type = "manual_time";
  r.run_type = GbRun::RT_Iteration;
  r.time_unit = benchmark::kMillisecond;
  r.iterations = calls;
  r.real_accumulated_time = ms_per_call * 1e-3 * static_cast<double>(calls);
  r.cpu_accumulated_time = 0.5 * r.real_accumulated_time;
  return r;
}

GbRun failed_round(const std::string& name) {
  GbRun r = round_of(name, 0.0, 0);
  r.error_occurred = true;
  r.error_message = "UNSUPPORTED: no";
  return r;
}

std::unique_ptr<RoundsReporter> make(std::vector<GbRun>* seen, std::size_t rounds, bool medians) {
  return std::make_unique<RoundsReporter>(std::make_unique<Capture>(seen), rounds, medians);
}

const GbRun* aggregate(const std::vector<GbRun>& runs, const std::string& name,
                     const std::string& kind) {
  for (const GbRun& r : runs) {
    if (r.run_type == GbRun::RT_Aggregate && r.run_name.function_name == name &&
        r.aggregate_name == kind) {
      return &r;
    }
  }
  return nullptr;
}

TEST(RoundsReporter, TheConsoleSeesOneMedianPerVariantAfterItsLastRound) {
  std::vector<GbRun> seen;
  auto rep = make(&seen, 3, true);
  // Rounds of two variants take turns, each round with its own iteration count.
  rep->ReportRuns({round_of("s/c/ka", 1.0, 10)});
  rep->ReportRuns({round_of("s/c/libtorch", 4.0, 3)});
  rep->ReportRuns({round_of("s/c/ka", 3.0, 20)});
  rep->ReportRuns({round_of("s/c/libtorch", 8.0, 2)});
  EXPECT_TRUE(seen.empty()) << "nothing is shown before a variant's last round";
  rep->ReportRuns({round_of("s/c/ka", 2.0, 5)});
  ASSERT_EQ(seen.size(), 1U);
  const GbRun& median = seen[0];
  EXPECT_EQ(median.run_type, GbRun::RT_Aggregate);
  EXPECT_EQ(median.aggregate_name, "median");
  EXPECT_EQ(median.benchmark_name(), "s/c/ka/manual_time_median");
  EXPECT_DOUBLE_EQ(median.GetAdjustedRealTime(), 2.0);  // ms per call: median of 1, 3, 2
  EXPECT_DOUBLE_EQ(median.GetAdjustedCPUTime(), 1.0);
  EXPECT_EQ(median.iterations, 3);
  EXPECT_EQ(median.repetitions, 3);
  rep->ReportRuns({round_of("s/c/libtorch", 6.0, 2)});
  ASSERT_EQ(seen.size(), 2U);
  EXPECT_EQ(seen[1].run_name.function_name, "s/c/libtorch");
  EXPECT_DOUBLE_EQ(seen[1].GetAdjustedRealTime(), 6.0);
}

TEST(RoundsReporter, JsonSeesEveryRoundAsARepetitionAndEveryAggregate) {
  std::vector<GbRun> seen;
  auto rep = make(&seen, 3, false);
  for (const double ms : {1.0, 3.0, 2.0}) rep->ReportRuns({round_of("s/c/ka", ms, 7)});
  ASSERT_EQ(seen.size(), 7U);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(seen[static_cast<std::size_t>(i)].run_type, GbRun::RT_Iteration);
    EXPECT_EQ(seen[static_cast<std::size_t>(i)].repetition_index, i);
    EXPECT_EQ(seen[static_cast<std::size_t>(i)].repetitions, 3);
  }
  EXPECT_DOUBLE_EQ(aggregate(seen, "s/c/ka", "mean")->GetAdjustedRealTime(), 2.0);
  EXPECT_DOUBLE_EQ(aggregate(seen, "s/c/ka", "median")->GetAdjustedRealTime(), 2.0);
  EXPECT_DOUBLE_EQ(aggregate(seen, "s/c/ka", "stddev")->GetAdjustedRealTime(), 1.0);
  const GbRun* cv = aggregate(seen, "s/c/ka", "cv");
  ASSERT_NE(cv, nullptr);
  EXPECT_EQ(cv->aggregate_unit, benchmark::kPercentage);
  EXPECT_DOUBLE_EQ(cv->real_accumulated_time, 0.5);  // stddev / mean
}

TEST(RoundsReporter, AnErrorIsShownOnceAndLeftOutOfTheAggregates) {
  std::vector<GbRun> seen;
  auto rep = make(&seen, 3, true);
  for (int i = 0; i < 3; ++i) rep->ReportRuns({failed_round("s/c/ka")});
  ASSERT_EQ(seen.size(), 1U);
  EXPECT_TRUE(seen[0].error_occurred);

  seen.clear();
  rep->ReportRuns({round_of("s/d/ka", 5.0, 4)});
  rep->ReportRuns({failed_round("s/d/ka")});
  rep->ReportRuns({round_of("s/d/ka", 7.0, 4)});
  ASSERT_EQ(seen.size(), 2U);
  EXPECT_TRUE(seen[0].error_occurred);
  EXPECT_DOUBLE_EQ(seen[1].GetAdjustedRealTime(), 6.0);  // the median of the two that ran
  EXPECT_EQ(seen[1].iterations, 2);
}

TEST(RoundsReporter, OneRoundIsShownAsItIs) {
  std::vector<GbRun> seen;
  auto rep = make(&seen, 1, true);
  rep->ReportRuns({round_of("s/c/ka", 2.5, 9)});
  ASSERT_EQ(seen.size(), 1U);
  EXPECT_EQ(seen[0].run_type, GbRun::RT_Iteration);
  EXPECT_DOUBLE_EQ(seen[0].GetAdjustedRealTime(), 2.5);
}

TEST(RoundsReporter, FinalizeSummarisesAVariantShortOfItsRounds) {
  std::vector<GbRun> seen;
  auto inner = std::make_unique<Capture>(&seen);
  Capture* capture = inner.get();
  RoundsReporter rep(std::move(inner), 5, true);
  rep.ReportRuns({round_of("s/c/ka", 1.0, 3)});
  rep.ReportRuns({round_of("s/c/ka", 2.0, 3)});
  EXPECT_TRUE(seen.empty());
  rep.Finalize();
  EXPECT_EQ(capture->finalized, 1);
  ASSERT_EQ(seen.size(), 1U);
  EXPECT_DOUBLE_EQ(seen[0].GetAdjustedRealTime(), 1.5);
  EXPECT_EQ(seen[0].iterations, 2);
}

}  // namespace
