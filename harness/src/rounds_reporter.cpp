#include <ka/harness/detail/rounds_reporter.hpp>

#include <ka/profiler/statistics.hpp>

#include <utility>

namespace ka::harness::detail {

RoundsReporter::RoundsReporter(std::unique_ptr<benchmark::BenchmarkReporter> inner,
                               std::size_t rounds, bool medians_only)
    : inner_(std::move(inner)), rounds_(rounds), medians_only_(medians_only) {}

bool RoundsReporter::ReportContext(const Context& context) {
  // Google Benchmark points this reporter at its output (the --benchmark_out file); the inner
  // one writes there too.
  inner_->SetOutputStream(&GetOutputStream());
  inner_->SetErrorStream(&GetErrorStream());
  return inner_->ReportContext(context);
}

void RoundsReporter::ReportRuns(const std::vector<Run>& runs) {
  std::vector<Run> shown;
  for (Run run : runs) {
    if (run.run_type != Run::RT_Iteration) {  // none come: each benchmark has one repetition
      shown.push_back(run);
      continue;
    }
    const std::string name = run.benchmark_name();
    Pending& p = pending_[name];
    run.repetitions = static_cast<std::int64_t>(rounds_);
    run.repetition_index = static_cast<std::int64_t>(p.runs.size());
    if (!medians_only_ || rounds_ == 1) {
      shown.push_back(run);
    } else if (run.error_occurred && !p.error_shown) {
      shown.push_back(run);  // the same error comes once per round
      p.error_shown = true;
    }
    p.runs.push_back(std::move(run));
    if (p.runs.size() >= rounds_) {
      add_aggregates(p.runs, shown);
      pending_.erase(name);
    }
  }
  if (!shown.empty()) inner_->ReportRuns(shown);
}

void RoundsReporter::add_aggregates(const std::vector<Run>& runs, std::vector<Run>& shown) const {
  std::vector<double> real;
  std::vector<double> cpu;
  const Run* first = nullptr;
  for (const Run& r : runs) {
    if (r.error_occurred || r.iterations <= 0) continue;
    const auto calls = static_cast<double>(r.iterations);
    real.push_back(r.real_accumulated_time / calls);
    cpu.push_back(r.cpu_accumulated_time / calls);
    if (first == nullptr) first = &r;
  }
  if (real.size() < 2) return;
  const profiler::Summary rs = profiler::summarize(real);
  const profiler::Summary cs = profiler::summarize(cpu);
  // A time aggregate is read back per iteration (accumulated / iterations), so it is stored
  // times its iterations: the rounds that count.
  auto aggregate = [&](const char* name, benchmark::StatisticUnit unit, double real_value,
                       double cpu_value) {
    Run a = *first;
    a.run_type = Run::RT_Aggregate;
    a.aggregate_name = name;
    a.aggregate_unit = unit;
    a.repetition_index = Run::no_repetition_index;
    a.iterations = static_cast<benchmark::IterationCount>(real.size());
    const double scale = unit == benchmark::kTime ? static_cast<double>(real.size()) : 1.0;
    a.real_accumulated_time = real_value * scale;
    a.cpu_accumulated_time = cpu_value * scale;
    return a;
  };
  if (medians_only_) {
    shown.push_back(aggregate("median", benchmark::kTime, rs.median, cs.median));
    return;
  }
  shown.push_back(aggregate("mean", benchmark::kTime, rs.mean, cs.mean));
  shown.push_back(aggregate("median", benchmark::kTime, rs.median, cs.median));
  shown.push_back(aggregate("stddev", benchmark::kTime, rs.stddev, cs.stddev));
  shown.push_back(aggregate("cv", benchmark::kPercentage, rs.cv(), cs.cv()));
}

void RoundsReporter::Finalize() {
  // A benchmark short of its rounds (Google Benchmark stopped early) still gets its aggregates.
  std::vector<Run> shown;
  for (const auto& [name, p] : pending_) add_aggregates(p.runs, shown);
  pending_.clear();
  if (!shown.empty()) inner_->ReportRuns(shown);
  inner_->Finalize();
}

}  // namespace ka::harness::detail
