// Dispatch overhead: ka's dispatcher against c10's, on a no-op kernel taking two tensors and
// returning the first. Prints the overhead ratios and ka's targets for them (ka/c10 <= 0.70).
//
//   ka_dispatch_bench --benchmark_repetitions=9 --benchmark_min_time=0.2
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/ones.h>
#include <benchmark/benchmark.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdio>
#include <ka/dispatch/dispatcher.hpp>
#include <ka/dispatch/library.hpp>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace {

at::Tensor noop(const at::Tensor& a, const at::Tensor& /*b*/) { return a; }

using Sig = at::Tensor(const at::Tensor&, const at::Tensor&);

// c10 side: the same kernel, registered as an unboxed CPU kernel.
TORCH_LIBRARY_FRAGMENT(kabench, m) { m.def("noop(Tensor a, Tensor b) -> Tensor"); }
TORCH_LIBRARY_IMPL(kabench, CPU, m) { m.impl("noop", TORCH_FN(noop)); }

// ka side.
KA_LIBRARY_FRAGMENT(kabench, m) { m.def("noop(Tensor a, Tensor b) -> Tensor"); }
KA_LIBRARY_IMPL(kabench, CPU, m) {
  m.impl("noop", ka::dispatch::KernelFunction::from_unboxed(&noop, ""));
}

struct Inputs {
  at::Tensor a = at::ones({4});
  at::Tensor b = at::ones({4});
};
Inputs& inputs() {
  static Inputs in;
  return in;
}

void BM_Floor_DirectCall(benchmark::State& state) {
  // volatile: the call stays an indirect call, like a dispatcher's.
  at::Tensor (*volatile fn)(const at::Tensor&, const at::Tensor&) = &noop;
  const Inputs& in = inputs();
  for (auto _ : state) benchmark::DoNotOptimize(fn(in.a, in.b));
}
BENCHMARK(BM_Floor_DirectCall);

void BM_C10_Typed(benchmark::State& state) {
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("kabench::noop", "").typed<Sig>();
  const Inputs& in = inputs();
  for (auto _ : state) benchmark::DoNotOptimize(op.call(in.a, in.b));
}
BENCHMARK(BM_C10_Typed);

void BM_C10_Boxed(benchmark::State& state) {
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("kabench::noop", "");
  const Inputs& in = inputs();
  torch::jit::Stack stack;
  stack.reserve(2);
  for (auto _ : state) {
    stack.clear();
    stack.emplace_back(in.a);
    stack.emplace_back(in.b);
    op.callBoxed(&stack);
    benchmark::DoNotOptimize(stack.data());
  }
}
BENCHMARK(BM_C10_Boxed);

void BM_Ka_Typed(benchmark::State& state) {
  const auto op =
      ka::dispatch::Dispatcher::singleton().find_op_or_throw("kabench::noop").typed<Sig>();
  const Inputs& in = inputs();
  for (auto _ : state) benchmark::DoNotOptimize(op.call(in.a, in.b));
}
BENCHMARK(BM_Ka_Typed);

void BM_Ka_Boxed(benchmark::State& state) {
  const auto op = ka::dispatch::Dispatcher::singleton().find_op_or_throw("kabench::noop");
  const Inputs& in = inputs();
  ka::dispatch::Stack stack;
  stack.reserve(2);
  for (auto _ : state) {
    stack.clear();
    stack.emplace_back(in.a);
    stack.emplace_back(in.b);
    op.call_boxed(&stack);
    benchmark::DoNotOptimize(stack.data());
  }
}
BENCHMARK(BM_Ka_Boxed);

/// Console output as usual, plus the per-iteration real time of every run, by benchmark.
class CollectingReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type == Run::RT_Iteration && r.iterations > 0) {
        times_ns_[r.run_name.function_name].push_back(r.GetAdjustedRealTime());
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
  /// Median over repetitions, in ns; NaN when the benchmark did not run.
  double median_ns(const std::string& name) const {
    auto it = times_ns_.find(name);
    if (it == times_ns_.end() || it->second.empty())
      return std::numeric_limits<double>::quiet_NaN();
    std::vector<double> v = it->second;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }

 private:
  std::map<std::string, std::vector<double>> times_ns_;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  CollectingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  const double floor = reporter.median_ns("BM_Floor_DirectCall");
  const double c10_typed = reporter.median_ns("BM_C10_Typed");
  const double c10_boxed = reporter.median_ns("BM_C10_Boxed");
  const double ka_typed = reporter.median_ns("BM_Ka_Typed");
  const double ka_boxed = reporter.median_ns("BM_Ka_Boxed");
  std::printf(
      "\nMedians over repetitions (ns per call): floor %.2f, c10 typed %.2f, c10 boxed %.2f, "
      "ka typed %.2f, ka boxed %.2f\n",
      floor, c10_typed, c10_boxed, ka_typed, ka_boxed);
  std::printf(
      "typed dispatch overhead (call - floor): c10 %.2f ns, ka %.2f ns; ratio ka/c10 = %.2f "
      "(target <= 0.70)\n",
      c10_typed - floor, ka_typed - floor, (ka_typed - floor) / (c10_typed - floor));
  std::printf("boxed call: ratio ka/c10 = %.2f (target <= 0.70)\n", ka_boxed / c10_boxed);
  return 0;
}
