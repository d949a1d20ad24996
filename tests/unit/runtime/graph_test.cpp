// Graph runs from TorchScript IR fixtures (tests/fixtures/graphs) against libtorch's own
// interpreter on the same graph, fused and unfused; eager calls through ka's dispatcher.
#include <ka/core/error.hpp>
#include <ka/dispatch/dispatcher.hpp>
#include <ka/runtime/runtime.hpp>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/jit.h>

#include <fstream>
#include <limits>
#include <sstream>

namespace ka::runtime {
namespace {

std::string fixture(const std::string& name) {
  std::ifstream in(std::string(KA_GRAPH_FIXTURES) + "/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<c10::IValue> reference(const std::string& ir, const std::vector<c10::IValue>& inputs) {
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(ir, graph.get());
  torch::jit::Code code(graph, "reference");
  torch::jit::InterpreterState state(code);
  std::vector<c10::IValue> stack = inputs;
  state.run(stack);
  if (stack.size() == 1 && stack[0].isTuple()) return stack[0].toTupleRef().elements().vec();
  return stack;
}

int fused_tasks(const GraphResult& r) {
  int n = 0;
  for (const auto& t : r.tasks) n += t.pattern.rfind("fused::", 0) == 0 ? 1 : 0;
  return n;
}

void expect_same(const std::string& name, const std::vector<c10::IValue>& inputs,
                 int want_fused) {
  SCOPED_TRACE(name);
  Runtime rt;
  const std::string ir = fixture(name);
  const auto want = reference(ir, inputs);
  for (bool fusion : {true, false}) {
    SCOPED_TRACE(fusion ? "fused" : "unfused");
    const GraphResult got = rt.run_graph(ir, inputs, {fusion});
    ASSERT_EQ(got.outputs.size(), want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      const at::Tensor g = got.outputs[i].toTensor();
      const at::Tensor w = want[i].toTensor();
      ASSERT_EQ(g.sizes(), w.sizes());
      EXPECT_TRUE(at::allclose(g, w, 1e-4, 1e-4))
          << "output " << i << " max diff " << (g - w).abs().max().item<float>();
    }
    EXPECT_EQ(fused_tasks(got), fusion ? want_fused : 0);
  }
}

TEST(Graph, MlpBlockFusesTheGeluIntoTheFirstGemm) {
  at::manual_seed(1);
  expect_same("mlp_block.ir",
              {at::randn({2, 9, 48}), at::randn({96, 48}), at::randn({96}), at::randn({48, 96}),
               at::randn({48})},
              1);
}

TEST(Graph, AttentionScoresFuseScaleAndMaskIntoSoftmax) {
  at::manual_seed(2);
  const at::Tensor mask = at::where(at::rand({4, 17, 17}) > 0.8, -1e4, 0.0).to(at::kFloat);
  expect_same("attention_scores.ir",
              {at::randn({4, 17, 32}), at::randn({4, 32, 17}), mask}, 1);
}

// Note [Attention pattern]: the whole of attention is one task, checked against libtorch; the
// mask mixes -1e4 and a causal -inf (whole key blocks of it are skipped).
at::Tensor attention_mask(std::int64_t sq, std::int64_t sk) {
  const at::Tensor padding = at::where(at::rand({sq, sk}) > 0.8, -1e4, 0.0).to(at::kFloat);
  return padding + at::full({sq, sk}, -std::numeric_limits<float>::infinity()).triu(1 + sk - sq);
}

TEST(Graph, AttentionFusesIntoOneKernel) {
  at::manual_seed(21);
  expect_same("attention.ir",
              {at::randn({4, 37, 16}), at::randn({4, 16, 300}), at::randn({4, 300, 24}),
               attention_mask(37, 300)},
              1);
}

TEST(Graph, AttentionOverHeadsFusesAtBatchTwo) {
  at::manual_seed(22);
  // Heads split from [B, S, H, D] at batch 2: matmul alone cannot view them as a bmm.
  const auto heads = [](std::int64_t s, std::int64_t d) {
    return at::randn({2, s, 3, d}).transpose(1, 2);
  };
  expect_same("attention_heads.ir",
              {heads(29, 16), heads(29, 16), heads(29, 8), attention_mask(29, 29)}, 1);
  // A padding mask per sequence, broadcast over heads and queries.
  const at::Tensor padding = at::where(at::rand({2, 1, 1, 29}) > 0.7, -1e4, 0.0).to(at::kFloat);
  expect_same("attention_heads.ir", {heads(29, 16), heads(29, 16), heads(29, 8), padding}, 1);
}

TEST(Graph, AttentionWithAMaskedFillFuses) {
  at::manual_seed(25);
  // GPT-2's form: masked_fill(bool causal, -1e4), the bool mask broadcast over the heads.
  const at::Tensor causal = at::ones({40, 40}, at::kBool).triu(1);
  expect_same("attention_masked_fill.ir",
              {at::randn({1, 3, 40, 16}), at::randn({1, 3, 16, 40}), at::randn({1, 3, 40, 16}),
               causal},
              1);
}

TEST(Graph, AttentionWithAWhereOrATensorFillFuses) {
  at::manual_seed(26);
  const auto operands = [](std::vector<c10::IValue> extra) {
    std::vector<c10::IValue> in = {at::randn({1, 3, 40, 16}), at::randn({1, 3, 16, 40}),
                                   at::randn({1, 3, 40, 16})};
    in.insert(in.end(), extra.begin(), extra.end());
    return in;
  };
  const at::Tensor masked = at::ones({40, 40}, at::kBool).triu(1);
  // Hugging Face GPT-2's form, traced: where(keep, scores / full([], size ** 0.5), full([],
  // finfo.min)), the scale and the fill made from sizes while extracting (Note [Final data
  // while extracting]).
  expect_same("attention_where.ir", operands({masked.logical_not()}), 1);
  // where(masked, -1e4, scores) fills where the mask is true; masked_fill by a 0-dim tensor.
  expect_same("attention_where_scalar.ir", operands({masked}), 1);
  expect_same("attention_masked_fill_tensor.ir",
              operands({masked, at::scalar_tensor(-1e4, at::kDouble)}), 1);
}

TEST(Graph, AttentionKeepsACastToWhatItsProbabilitiesAre) {
  at::manual_seed(27);
  const auto q = at::randn({2, 3, 33, 16});
  const auto k = at::randn({2, 3, 16, 33});
  const auto v = at::randn({2, 3, 33, 16});
  // probs.type_as(a float32 tensor) and Hugging Face's probs.to(v.device, float32) are the
  // identity on ka's float32 probabilities (Note [Identity casts]).
  expect_same("attention_type_as.ir", {q, k, v, at::zeros({1})}, 1);
  expect_same("attention_to_device.ir", {q, k, v, at::randn({33, 33})}, 1);
  // Cast to float64: the packer refuses the group, its nodes run one by one (the cast and the
  // float64 product on libtorch), and the result is libtorch's.
  expect_same("attention_type_as.ir", {q, k, v.to(at::kDouble), at::zeros({1}, at::kDouble)},
              0);
}

TEST(Graph, AttentionWithoutScaleOrMaskFuses) {
  at::manual_seed(23);
  expect_same("attention_plain.ir",
              {at::randn({6, 50, 32}), at::randn({6, 70, 32}), at::randn({6, 70, 32})}, 1);
}

TEST(Graph, AttentionTheKernelRefusesRunsNodeByNode) {
  at::manual_seed(24);
  // softmax over the queries (dim 1), not the keys: the FusionChecker sees the pattern, the
  // packer refuses it, and its five nodes run unfused.
  expect_same("attention_over_queries.ir",
              {at::randn({2, 20, 8}), at::randn({2, 8, 20}), at::randn({2, 20, 8})}, 0);
}

TEST(Graph, ResidualAddFusesIntoLayerNorm) {
  at::manual_seed(3);
  expect_same("residual_layer_norm.ir",
              {at::randn({5, 64}), at::randn({5, 64}), at::randn({64}), at::randn({64})}, 1);
}

TEST(Graph, ChainStopsAtAValueReadTwice) {
  at::manual_seed(4);
  // mul → add → sigmoid (read by silu and returned) | silu → relu | sum
  expect_same("chain_and_sum.ir", {at::randn({6, 20}), at::randn({20})}, 2);
}

TEST(Graph, IndependentTasksHaveNoDependencies) {
  at::manual_seed(5);
  Runtime rt;
  const std::string ir = fixture("independent_matmuls.ir");
  const std::vector<c10::IValue> in = {at::randn({64, 32}), at::randn({32, 64}),
                                       at::randn({64, 16}), at::randn({16, 64})};
  const GraphResult r = rt.run_graph(ir, in);
  ASSERT_EQ(r.tasks.size(), 3U);
  EXPECT_TRUE(r.tasks[0].dependencies.empty());
  EXPECT_TRUE(r.tasks[1].dependencies.empty());
  EXPECT_EQ(r.tasks[2].dependencies,
            (std::vector<std::uint64_t>{r.tasks[0].task_id, r.tasks[1].task_id}));
  EXPECT_TRUE(at::allclose(r.outputs[0].toTensor(), reference(ir, in)[0].toTensor(), 1e-4, 1e-4));
  for (const auto& t : r.tasks) EXPECT_EQ(t.provenance, db::Provenance::kHeuristic);
}

TEST(Graph, AnInPlaceWriteWaitsForEarlierReaders) {
  // y = relu(x); x += 1; z = y * x  — the add_ must not run before relu read x.
  const std::string ir = R"IR(
graph(%x : Tensor, %one_t : Tensor):
  %one : int = prim::Constant[value=1]()
  %y : Tensor = aten::relu(%x)
  %x2 : Tensor = aten::add_(%x, %one_t, %one)
  %z : Tensor = aten::mul(%y, %x2)
  return (%z, %y)
)IR";
  Runtime rt;
  const at::Tensor x = at::randn({512, 512});
  const at::Tensor want_y = at::relu(x);
  const at::Tensor want_z = want_y * (x + 1);
  const GraphResult r = rt.run_graph(ir, {x, at::ones({512, 512})});
  EXPECT_TRUE(at::allclose(r.outputs[1].toTensor(), want_y));
  EXPECT_TRUE(at::allclose(r.outputs[0].toTensor(), want_z));
  ASSERT_EQ(r.tasks.size(), 3U);
  EXPECT_EQ(r.tasks[1].dependencies, std::vector<std::uint64_t>{r.tasks[0].task_id});
}

TEST(Graph, AScriptedFunctionsGraphRuns) {
  // The graph of TorchScript compiled from source, as a loaded module's method would give.
  const auto cu = torch::jit::compile(R"PY(
def block(x, w, b, res):
    h = torch.mm(x, w) + b
    return torch.relu(h + res) * 0.5
)PY");
  auto graph = torch::jit::toGraphFunction(cu->get_function("block")).graph()->copy();
  at::manual_seed(6);
  const std::vector<c10::IValue> in = {at::randn({8, 16}), at::randn({16, 24}), at::randn({24}),
                                       at::randn({8, 24})};
  Runtime rt;
  const GraphResult r = rt.run_graph(*graph, in);
  const at::Tensor want =
      at::relu(at::mm(in[0].toTensor(), in[1].toTensor()) + in[2].toTensor() + in[3].toTensor()) * 0.5;
  ASSERT_EQ(r.outputs.size(), 1U);
  EXPECT_TRUE(at::allclose(r.outputs[0].toTensor(), want, 1e-4, 1e-4));
  EXPECT_FALSE(r.tasks.empty());
}

TEST(Graph, BadGraphsAreClearErrors) {
  Runtime rt;
  EXPECT_THROW(rt.run_graph("graph(%x : Tensor:\n", {at::ones({1})}), ValueError);
  // A node without ka's kernel or a fallback (an OpGraph built by hand) is refused by name.
  extractor::OpGraph hand;
  hand.values = {at::ones({2}), c10::IValue()};
  hand.nodes.push_back({"aten::abs", {0}, {1}, {}, extractor::OpGraph::Reads::kData});
  hand.outputs = {1};
  try {
    rt.extractor().run_graph(hand);
    ADD_FAILURE();
  } catch (const NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("graph: aten::abs (node 0): validate: kernel not found "
                                         "for aten::abs"),
              std::string::npos)
        << e.what();
  }
  // A failing node means nothing ran: the in-place add before it did not touch x.
  const std::string half = R"IR(
graph(%x : Tensor, %w : Tensor):
  %one : int = prim::Constant[value=1]()
  %x2 : Tensor = aten::add_(%x, %x, %one)
  %y : Tensor = aten::mm(%x2, %w)
  return (%y)
)IR";
  const at::Tensor x = at::ones({2, 3});
  try {
    rt.run_graph(half, {x, at::ones({4, 4})});
    ADD_FAILURE() << "mm of [2, 3] and [4, 4] ran";
  } catch (const ValueError& e) {
    // The error names the graph's node, its device and the stage that refused it.
    EXPECT_NE(std::string(e.what()).find("graph: aten::mm (node 1) on cpu: pack: "),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(at::equal(x, at::ones({2, 3})));
}

TEST(Runtime, EagerCallsGoThroughKasDispatcher) {
  Runtime rt;
  const at::Tensor a = at::randn({3, 5});
  const at::Tensor b = at::randn({5});
  auto out = rt.call("aten::add.Tensor", {a, b, 2});
  ASSERT_EQ(out.size(), 1U);
  EXPECT_TRUE(at::allclose(out[0].toTensor(), a + 2 * b));
  const at::Tensor w = at::randn({7, 5});
  out = rt.call("aten::linear", {a, w, c10::IValue()});
  EXPECT_TRUE(at::allclose(out[0].toTensor(), at::linear(a, w), 1e-4, 1e-4));
  out = rt.call("aten::softmax.int", {a, 1, c10::IValue()});
  EXPECT_TRUE(at::allclose(out[0].toTensor(), at::softmax(a, 1), 1e-5, 1e-6));
  const std::string table =
      dispatch::Dispatcher::singleton().find_op_or_throw("aten::linear").dump_computed_table();
  EXPECT_NE(table.find("ka linear"), std::string::npos) << table;
  EXPECT_EQ(rt.policy(), SchedulePolicy::kInputsDevice);
}

}  // namespace
}  // namespace ka::runtime
