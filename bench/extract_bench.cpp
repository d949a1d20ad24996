// Eager overhead of ka's whole pipeline (dispatch → extract → execute) on aten::add.Tensor with
// 1-element CPU tensors, against libtorch's at::add in the same process; and the extraction
// stage alone. Prints the ratios and ka's targets for them (the pipeline <= 0.5x at::add, the
// extraction stage <= 150 ns).
//
//   ka_extract_bench --benchmark_repetitions=9 --benchmark_min_time=0.2
#include <ka/dispatch/dispatcher.hpp>
#include <ka/extractor/extractor.hpp>
#include <ka/runtime/aten_ops.hpp>

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace {

using T = const at::Tensor&;
using S = const at::Scalar&;

struct Inputs {
  at::Tensor a = at::ones({1});
  at::Tensor b = at::ones({1});
};
Inputs& inputs() {
  static Inputs in;
  return in;
}

void BM_Libtorch_AtAdd(benchmark::State& state) {
  const Inputs& in = inputs();
  for (auto _ : state) benchmark::DoNotOptimize(at::add(in.a, in.b));
}
BENCHMARK(BM_Libtorch_AtAdd);

void BM_Libtorch_AtEmpty(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(at::empty({1}));
}
BENCHMARK(BM_Libtorch_AtEmpty);

void BM_Libtorch_EmptyCpuDirect(benchmark::State& state) {
  const std::int64_t size = 1;
  for (auto _ : state) {
    benchmark::DoNotOptimize(at::detail::empty_cpu(c10::IntArrayRef(&size, 1), at::kFloat, false,
                                                   c10::MemoryFormat::Contiguous));
  }
}
BENCHMARK(BM_Libtorch_EmptyCpuDirect);

// The whole pipeline: ka's dispatcher, typed call, extract and execute.
void BM_Ka_PipelineTyped(benchmark::State& state) {
  ka::runtime::register_aten_ops();
  const auto add = ka::dispatch::Dispatcher::singleton()
                       .find_op_or_throw("aten::add.Tensor")
                       .typed<at::Tensor(T, T, S)>();
  const Inputs& in = inputs();
  const at::Scalar one(1);
  for (auto _ : state) benchmark::DoNotOptimize(add.call(in.a, in.b, one));
}
BENCHMARK(BM_Ka_PipelineTyped);

// Extractor::call: extract and execute, no dispatcher.
void BM_Ka_ExtractAndExecute(benchmark::State& state) {
  auto& ex = ka::extractor::Extractor::global();
  const auto op = ex.resolve("aten::add.Tensor");
  const Inputs& in = inputs();
  const c10::IValue args[3] = {in.a, in.b, 1};
  for (auto _ : state) benchmark::DoNotOptimize(ex.call(op, args, 3));
}
BENCHMARK(BM_Ka_ExtractAndExecute);

// Extraction alone (validate, lookup, pack incl. the output allocation, configure, assemble).
void BM_Ka_ExtractOnly(benchmark::State& state) {
  auto& ex = ka::extractor::Extractor::global();
  const auto op = ex.resolve("aten::add.Tensor");
  const Inputs& in = inputs();
  const c10::IValue args[3] = {in.a, in.b, 1};
  for (auto _ : state) benchmark::DoNotOptimize(ex.extract_only(op, args, 3));
}
BENCHMARK(BM_Ka_ExtractOnly);

// The extraction stage with nothing allocated: the in-place add_ writes self, so this is
// validate + lookup + pack + configure + assemble and nothing else.
void BM_Ka_ExtractOnlyInPlace(benchmark::State& state) {
  auto& ex = ka::extractor::Extractor::global();
  const auto op = ex.resolve("aten::add_.Tensor");
  const Inputs& in = inputs();
  const c10::IValue args[3] = {in.a, in.b, 1};
  for (auto _ : state) benchmark::DoNotOptimize(ex.extract_only(op, args, 3));
}
BENCHMARK(BM_Ka_ExtractOnlyInPlace);

// Collects the median time per benchmark (over repetitions) to print the ratios.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median") continue;
      const std::string name = r.run_name.function_name;
      const double ns = r.GetAdjustedRealTime();
      auto& best = medians_[name];
      // Without repetitions there is one iteration run; with them, the median aggregate wins.
      if (r.run_type == Run::RT_Aggregate || best == 0.0) best = ns;
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    auto get = [&](const char* n) {
      const auto it = medians_.find(n);
      return it == medians_.end() ? std::numeric_limits<double>::quiet_NaN() : it->second;
    };
    const double at_add = get("BM_Libtorch_AtAdd");
    const double empty_direct = get("BM_Libtorch_EmptyCpuDirect");
    const double pipeline = get("BM_Ka_PipelineTyped");
    const double extract = get("BM_Ka_ExtractOnly");
    const double extract_inplace = get("BM_Ka_ExtractOnlyInPlace");
    std::printf("\nEager overhead, aten::add.Tensor on 1-element CPU tensors (median times):\n");
    std::printf("  at::add                          %8.1f ns\n", at_add);
    std::printf("  ka pipeline (dispatch+extract+execute) %8.1f ns  = %.2fx at::add (target <= 0.5x)\n",
                pipeline, pipeline / at_add);
    std::printf("  ka extraction incl. output alloc %8.1f ns\n", extract);
    std::printf("  output allocation (empty_cpu)    %8.1f ns\n", empty_direct);
    std::printf("  ka extraction stage alone (in-place add_, nothing allocated) %8.1f ns  (target <= 150 ns)\n",
                extract_inplace);
  }

 private:
  std::map<std::string, double> medians_;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
