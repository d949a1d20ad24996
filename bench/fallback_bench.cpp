// What a graph node costs ka beyond its kernel, run through ka's extractor (lowered once, as a
// program that keeps its lowered graph runs it) against libtorch's interpreter on the same
// graph. The counter ns_per_node is each variant's time per node.
//  - Fallback tasks (Note [Fallback nodes]): 8 tiny aten::view nodes, each followed by an
//    aten::transpose (16 nodes), none of which ka serves; also at::view / at::transpose called
//    directly. ka's target is at most 2 us more per node than libtorch's.
//  - ka's own tasks: a small block on 4 x 32 floats (linear, relu, add, linear, softmax: 4
//    tasks fused), where the kernels take well under a microsecond and what is timed is
//    extraction, the executor's hand-offs and allocation.
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

void per_node(benchmark::State& state, int nodes = 2 * kPairs) {
  state.counters["ns_per_node"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * nodes,
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

constexpr int kTinyNodes = 5;

std::shared_ptr<torch::jit::Graph> tiny_tasks_graph() {
  const std::string ir = R"IR(graph(%x : Tensor, %y : Tensor, %w1 : Tensor, %b1 : Tensor,
      %w2 : Tensor, %b2 : Tensor):
  %one : int = prim::Constant[value=1]()
  %last : int = prim::Constant[value=-1]()
  %none : NoneType = prim::Constant()
  %h0 : Tensor = aten::linear(%x, %w1, %b1)
  %h1 : Tensor = aten::relu(%h0)
  %h : Tensor = aten::add(%h1, %y, %one)
  %z : Tensor = aten::linear(%h, %w2, %b2)
  %p : Tensor = aten::softmax(%z, %last, %none)
  return (%h, %p)
)IR";
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(ir, graph.get());
  return graph;
}

std::vector<c10::IValue> tiny_tasks_inputs() {
  return {at::randn({4, 32}), at::randn({4, 32}), at::randn({32, 32}),
          at::randn({32}),    at::randn({16, 32}), at::randn({16})};
}

void BM_Ka_TinyTasks(benchmark::State& state) {
  const auto graph = tiny_tasks_graph();
  ka::runtime::Runtime rt;
  ka::extractor::OpGraph g = ka::runtime::Runtime::lower(*graph, tiny_tasks_inputs());
  for (auto _ : state) benchmark::DoNotOptimize(rt.extractor().run_graph(g));
  per_node(state, kTinyNodes);
}
BENCHMARK(BM_Ka_TinyTasks);

void BM_Libtorch_InterpreterTinyTasks(benchmark::State& state) {
  const torch::jit::Code code(tiny_tasks_graph(), "tiny_tasks");
  const std::vector<c10::IValue> inputs = tiny_tasks_inputs();
  for (auto _ : state) {
    std::vector<c10::IValue> stack = inputs;
    torch::jit::InterpreterState(code).run(stack);
    benchmark::DoNotOptimize(stack);
  }
  per_node(state, kTinyNodes);
}
BENCHMARK(BM_Libtorch_InterpreterTinyTasks);

}  // namespace

BENCHMARK_MAIN();
