// Constant weights packed once (Note [Constant weights packed once]): a graph constant that a
// GEMM reads is packed on the first run and reused on the next, packed again after an
// in-place write, and never packed ahead where the graph itself writes it or where it keeps
// no version counter. at::linear on the weight as it is at the time is the oracle.
#include <ka/extractor/extractor.hpp>
#include <ka/runtime/runtime.hpp>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/ir/irparser.h>

#include <memory>
#include <string>

namespace ka::runtime {
namespace {

using extractor::packed_weights_stats;

// y = linear(x, weight, bias) with weight and bias as graph constants (as freezing leaves a
// module's parameters); `write_first` adds 1 to the weight in place before the linear. The
// graph is parsed with weight and bias as inputs, which then become constants: parseIR and
// Graph::insertConstant keep c10's inline type casts out of this file, whose UBSan vptr
// checks need a typeinfo that libtorch does not export (c10::DynamicType).
std::shared_ptr<torch::jit::Graph> linear_graph(const at::Tensor& weight, const at::Tensor& bias,
                                                bool write_first = false) {
  std::string ir = "graph(%x : Tensor, %w : Tensor, %b : Tensor):\n";
  if (write_first) {
    ir += "  %one : float = prim::Constant[value=1.]()\n"
          "  %alpha : int = prim::Constant[value=1]()\n"
          "  %w1 : Tensor = aten::add_(%w, %one, %alpha)\n";
  }
  ir += "  %y : Tensor = aten::linear(%x, %w, %b)\n  return (%y)";
  auto g = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(ir, g.get());
  g->setInsertPoint(g->block()->nodes().front());
  g->inputs()[1]->replaceAllUsesWith(g->insertConstant(weight));
  g->inputs()[2]->replaceAllUsesWith(g->insertConstant(bias));
  g->eraseInput(2);
  g->eraseInput(1);
  return g;
}

at::Tensor run(const Runtime& rt, torch::jit::Graph& g, const at::Tensor& x) {
  const GraphResult r = rt.run_graph(g, {x});
  return r.outputs.at(0).toTensor();
}

void expect_close(const at::Tensor& got, const at::Tensor& want, const char* what) {
  EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-4))
      << what << ": max |diff| " << (got - want).abs().max().item<float>();
}

// 128 rows: the tiled path, which packs B (M <= 16 would stream it instead).
constexpr std::int64_t kRows = 128;

TEST(PackedWeights, AConstantIsPackedOnceAndReusedUntilItIsWritten) {
  at::manual_seed(3);
  const Runtime rt;
  const at::Tensor weight = at::randn({96, 80});
  const at::Tensor bias = at::randn({96});
  const at::Tensor x = at::randn({kRows, 80});
  const auto g = linear_graph(weight, bias);
  const auto before = packed_weights_stats();
  expect_close(run(rt, *g, x), at::linear(x, weight, bias), "first run");
  const auto first = packed_weights_stats();
  EXPECT_EQ(first.packs, before.packs + 1);
  expect_close(run(rt, *g, x), at::linear(x, weight, bias), "second run");
  const auto second = packed_weights_stats();
  EXPECT_EQ(second.packs, first.packs) << "packed again though unchanged";
  EXPECT_EQ(second.reuses, first.reuses + 1);
  {
    const at::NoGradGuard no_grad;
    weight.mul_(-0.5);  // bumps the version counter
  }
  expect_close(run(rt, *g, x), at::linear(x, weight, bias), "after an in-place write");
  EXPECT_EQ(packed_weights_stats().packs, second.packs + 1) << "a written weight was reused";
  // The budget bounds what is held: the entries' bytes never exceed it.
  const auto now = packed_weights_stats();
  EXPECT_LE(now.bytes, now.budget_bytes);
  EXPECT_GE(now.entries, 1);
}

TEST(PackedWeights, AConstantTheGraphWritesIsNotPackedAhead) {
  at::manual_seed(4);
  const Runtime rt;
  const at::Tensor weight = at::randn({64, 48});
  const at::Tensor bias = at::randn({64});
  const at::Tensor x = at::randn({kRows, 48});
  const auto g = linear_graph(weight, bias, /*write_first=*/true);
  for (int i = 0; i < 2; ++i) {
    const auto before = packed_weights_stats();
    const at::Tensor y = run(rt, *g, x);  // the graph adds 1 to weight, then multiplies
    expect_close(y, at::linear(x, weight, bias), "weight written by the graph");
    EXPECT_EQ(packed_weights_stats().packs, before.packs);
    EXPECT_EQ(packed_weights_stats().reuses, before.reuses);
  }
}

TEST(PackedWeights, AnInferenceTensorIsPackedOnEveryCall) {
  at::manual_seed(5);
  const Runtime rt;
  at::Tensor weight;
  {
    const c10::InferenceMode guard;
    weight = at::randn({64, 32});  // keeps no version counter
  }
  const at::Tensor bias = at::randn({64});
  const at::Tensor x = at::randn({kRows, 32});
  const auto g = linear_graph(weight, bias);
  const auto before = packed_weights_stats();
  expect_close(run(rt, *g, x), at::linear(x, weight, bias), "inference weight");
  expect_close(run(rt, *g, x), at::linear(x, weight, bias), "inference weight, again");
  EXPECT_EQ(packed_weights_stats().packs, before.packs);
}

TEST(PackedWeights, ADeadConstantIsDroppedAndANewOneAtItsAddressIsPacked) {
  at::manual_seed(6);
  const Runtime rt;
  const at::Tensor x = at::randn({kRows, 40});
  const at::Tensor bias = at::randn({56});
  extractor::clear_packed_weights();
  for (int i = 0; i < 3; ++i) {
    // Each weight dies with its graph; the allocator may hand the next one the same address.
    const at::Tensor weight = at::randn({56, 40});
    const auto g = linear_graph(weight, bias);
    const auto before = packed_weights_stats();
    expect_close(run(rt, *g, x), at::linear(x, weight, bias), "fresh weight");
    EXPECT_EQ(packed_weights_stats().packs, before.packs + 1) << "run " << i;
  }
  EXPECT_LE(packed_weights_stats().entries, 2) << "dead weights are dropped on the next pack";
}

}  // namespace
}  // namespace ka::runtime
