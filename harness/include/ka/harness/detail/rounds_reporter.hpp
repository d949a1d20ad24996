#pragma once
// ka-bench's rounds as Google Benchmark repetitions (Note [Interleaved rounds], bench.cpp).

#include <benchmark/benchmark.h>

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ka::harness::detail {

/// Forwards Google Benchmark's runs to `inner` as if each benchmark had been run with
/// `rounds` repetitions: ka-bench registers every round of a variant as its own benchmark of
/// one repetition (same name), so Google Benchmark reports R separate runs and no aggregates.
/// This numbers a benchmark's runs as its repetitions and, when the last one arrives, adds the
/// aggregates Google Benchmark would (mean, median, stddev of the per-iteration time, and cv),
/// over the runs without an error, when at least two have none.
///
/// `medians_only` (the console): only the median is shown, or each run when rounds == 1; an
/// error is shown once, not once per round. Otherwise (JSON, the --benchmark_out file) every
/// run and every aggregate is forwarded.
class RoundsReporter : public benchmark::BenchmarkReporter {
 public:
  RoundsReporter(std::unique_ptr<benchmark::BenchmarkReporter> inner, std::size_t rounds,
                 bool medians_only);

  bool ReportContext(const Context& context) override;
  void ReportRuns(const std::vector<Run>& runs) override;
  void Finalize() override;

 private:
  struct Pending {
    std::vector<Run> runs;
    bool error_shown = false;
  };
  void add_aggregates(const std::vector<Run>& runs, std::vector<Run>& shown) const;

  std::unique_ptr<benchmark::BenchmarkReporter> inner_;
  std::size_t rounds_;
  bool medians_only_;
  std::map<std::string, Pending> pending_;  // by benchmark name, until its last round
};

}  // namespace ka::harness::detail
