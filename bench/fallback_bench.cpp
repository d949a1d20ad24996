// What a fallback task costs (Note [Fallback nodes]): a graph of 8 tiny aten::view nodes, each
// followed by an aten::transpose (16 nodes), none of which ka serves, run through ka's extractor (lowered once,
// as a program that keeps its lowered graph runs it), against libtorch's interpreter on the
// same graph and against calling at::view / at::transpose directly. The counter ns_per_node
// is each variant's time per node; ka's target is at most 2 us more per node than libtorch's.
//
//   ka_fallback_bench --benchmark_repetitions=5 --benchmark_min_time=0.2
#include <ka/extractor/extractor.hpp>
#include <ka/runtime/runtime.hpp>

#include <ATen/ATen.h>
#include <benchmark/benchmark.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <memory>
#include <string>
#include <vector>

namespace {

constexpr int kPairs = 8;  // view + transpose each: 16 nodes

std::shared_ptr<torch::jit::Graph> views_graph() {
  std::string ir = "graph(%x : Tensor):\n  %s : int[] = prim::Constant[value=[4, 2]]()\n"
                   "  %d0 : int = prim::Constant[value=0]()\n  %d1 : int = prim::Constant[value=1]()\n";
  std::string outputs;
  for (int i = 0; i < kPairs; ++i) {
    const std::string v = "%v" + std::to_string(i);
    const std::string t = "%t" + std::to_string(i);
    ir += "  " + v + " : Tensor = aten::view(%x, %s)\n";
    ir += "  " + t + " : Tensor = aten::transpose(" + v + ", %d0, %d1)\n";
    outputs += (i ? ", " : "") + t;
  }
  ir += "  return (" + outputs + ")\n";
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(ir, graph.get());
  return graph;
}

void per_node(benchmark::State& state) {
  state.counters["ns_per_node"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 2 * kPairs,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_Ka_FallbackViews(benchmark::State& state) {
  const auto graph = views_graph();
  ka::runtime::Runtime rt;
  ka::extractor::OpGraph g = ka::runtime::Runtime::lower(*graph, {at::ones({8})});
  for (auto _ : state) benchmark::DoNotOptimize(rt.extractor().run_graph(g));
  per_node(state);
}
BENCHMARK(BM_Ka_FallbackViews);

void BM_Libtorch_InterpreterViews(benchmark::State& state) {
  const auto graph = views_graph();
  const torch::jit::Code code(graph, "views");
  const at::Tensor x = at::ones({8});
  for (auto _ : state) {
    std::vector<c10::IValue> stack{x};
    torch::jit::InterpreterState(code).run(stack);
    benchmark::DoNotOptimize(stack);
  }
  per_node(state);
}
BENCHMARK(BM_Libtorch_InterpreterViews);

void BM_Libtorch_DirectViews(benchmark::State& state) {
  const at::Tensor x = at::ones({8});
  for (auto _ : state) {
    for (int i = 0; i < kPairs; ++i) benchmark::DoNotOptimize(at::transpose(x.view({4, 2}), 0, 1));
  }
  per_node(state);
}
BENCHMARK(BM_Libtorch_DirectViews);

}  // namespace

BENCHMARK_MAIN();
