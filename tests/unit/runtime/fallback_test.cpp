// Graphs with nodes ka does not serve (Note [Fallback nodes]): libtorch's own kernels run
// them inside ka's run, views keep their aliasing, and control flow runs in libtorch's
// interpreter. libtorch running the same TorchScript is the oracle throughout.
#include <ka/core/error.hpp>
#include <ka/runtime/runtime.hpp>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/jit.h>

#include <algorithm>
#include <limits>
#include <string>

namespace ka::runtime {
namespace {

using extractor::TaskPlan;

// A TorchScript function, compiled from source, and its inlined graph.
struct Scripted {
  std::shared_ptr<torch::jit::CompilationUnit> unit;
  torch::jit::GraphFunction* fn = nullptr;
  std::shared_ptr<torch::jit::Graph> graph;

  Scripted(const std::string& source, const std::string& name)
      : unit(torch::jit::compile(source)),
        fn(&torch::jit::toGraphFunction(unit->get_function(name))),
        graph(fn->graph()->copy()) {
    torch::jit::Inline(*graph);
  }

  // libtorch's own run of the function.
  std::vector<c10::IValue> reference(const std::vector<c10::IValue>& inputs) const {
    std::vector<c10::IValue> stack = inputs;
    fn->run(stack);
    if (stack.size() == 1 && stack[0].isTuple()) return stack[0].toTupleRef().elements().vec();
    return stack;
  }
};

// A graph that returns a tuple returns one value; its items are the outputs.
std::vector<c10::IValue> items(const std::vector<c10::IValue>& outputs) {
  if (outputs.size() == 1 && outputs[0].isTuple()) return outputs[0].toTupleRef().elements().vec();
  return outputs;
}

void expect_outputs_match(const std::vector<c10::IValue>& outputs,
                          const std::vector<c10::IValue>& want, double tol = 1e-4) {
  const std::vector<c10::IValue> got = items(outputs);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("output " + std::to_string(i));
    const at::Tensor g = got[i].toTensor();
    const at::Tensor w = want[i].toTensor();
    ASSERT_EQ(g.sizes(), w.sizes());
    EXPECT_TRUE(at::allclose(g, w, tol, tol)) << "max diff " << (g - w).abs().max().item<double>();
  }
}

const TaskPlan* find_plan(const std::vector<TaskPlan>& plans, const std::string& pattern) {
  const auto it = std::find_if(plans.begin(), plans.end(),
                               [&](const TaskPlan& p) { return p.pattern == pattern; });
  return it == plans.end() ? nullptr : &*it;
}

// Every node of the lowered graph appears in exactly one plan: --explain accounts for it.
void expect_every_node_planned(torch::jit::Graph& graph, const std::vector<c10::IValue>& inputs,
                               const std::vector<TaskPlan>& plans) {
  const extractor::OpGraph g = Runtime::lower(graph, inputs);
  std::vector<int> seen(g.nodes.size(), 0);
  for (const TaskPlan& p : plans) {
    for (int n : p.nodes) ++seen[static_cast<std::size_t>(n)];
  }
  for (std::size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i], 1) << "node " << i << " " << g.nodes[i].signature;
  }
}

// A GPT-2 block as its PyTorch code is written: the fused qkv projection split three ways,
// heads made by view and transpose, attention by matmul, heads merged by contiguous and view.
const char* kGpt2Block = R"TS(
def block(x: Tensor, ln1_w: Tensor, ln1_b: Tensor, w_qkv: Tensor, b_qkv: Tensor, w_o: Tensor,
          b_o: Tensor, ln2_w: Tensor, ln2_b: Tensor, w_fc: Tensor, b_fc: Tensor, w_proj: Tensor,
          b_proj: Tensor, mask: Tensor, heads: int):
    B = x.size(0)
    T = x.size(1)
    C = x.size(2)
    h = torch.layer_norm(x, [C], ln1_w, ln1_b, 1e-5, True)
    q, k, v = torch.linear(h, w_qkv, b_qkv).split(C, dim=2)
    q = q.view(B, T, heads, C // heads).transpose(1, 2)
    k = k.view(B, T, heads, C // heads).transpose(1, 2)
    v = v.view(B, T, heads, C // heads).transpose(1, 2)
    att = torch.matmul(q, k.transpose(-2, -1)) * 0.125
    att = torch.softmax(att + mask, -1)
    y = torch.matmul(att, v).transpose(1, 2).contiguous().view(B, T, C)
    x = x + torch.linear(y, w_o, b_o)
    m = torch.gelu(torch.linear(torch.layer_norm(x, [C], ln2_w, ln2_b, 1e-5, True), w_fc, b_fc))
    return x + torch.linear(m, w_proj, b_proj)
)TS";

std::vector<c10::IValue> gpt2_inputs(std::int64_t batch, std::int64_t tokens, std::int64_t c,
                                     std::int64_t heads) {
  at::manual_seed(7);
  const auto w = [](std::int64_t out, std::int64_t in) {
    return at::randn({out, in}) / std::sqrt(static_cast<double>(in));
  };
  const at::Tensor causal = at::triu(at::ones({tokens, tokens}), 1) * -1e4;
  return {at::randn({batch, tokens, c}), 1 + 0.1 * at::randn({c}), 0.1 * at::randn({c}),
          w(3 * c, c), 0.1 * at::randn({3 * c}), w(c, c), 0.1 * at::randn({c}),
          1 + 0.1 * at::randn({c}), 0.1 * at::randn({c}), w(4 * c, c), 0.1 * at::randn({4 * c}),
          w(c, 4 * c), 0.1 * at::randn({c}), causal, heads};
}

TEST(Fallback, AGpt2BlockRunsWithLibtorchForWhatKaDoesNotServe) {
  const Scripted s(kGpt2Block, "block");
  Runtime rt;
  // Batch 1, fused and unfused; batch 2, whose heads' batch dimensions no view can merge, so
  // attention's matmuls alone run on libtorch (Note [matmul on ka]) while fused attention
  // takes the heads as they are (Note [Packing attention]).
  for (const auto& [batch, fusion] : {std::pair{1, true}, std::pair{1, false}, std::pair{2, true},
                                      std::pair{2, false}}) {
    SCOPED_TRACE(std::string(fusion ? "fused" : "unfused") + ", batch " + std::to_string(batch));
    const std::vector<c10::IValue> inputs = gpt2_inputs(batch, 24, 64, 4);
    const auto want = s.reference(inputs);
    const GraphResult got = rt.run_graph(*s.graph, inputs, {fusion});
    expect_outputs_match(got.outputs, want);
    expect_every_node_planned(*s.graph, inputs, got.tasks);
    int on_ka = 0;
    for (const TaskPlan& p : got.tasks) {
      if (p.provenance != db::Provenance::kFallback) {
        ++on_ka;
        continue;
      }
      EXPECT_EQ(p.kernel, "libtorch") << p.pattern;
      EXPECT_FALSE(p.fallback.empty()) << p.pattern;
    }
    // Two layer norms, four linears, the scale, the mask add, softmax, gelu, two residuals.
    EXPECT_GE(on_ka, fusion ? 6 : 12);
    // The views run during extraction; contiguous of the merged heads is a copy on ka (Note
    // [contiguous as a copy]). The heads' matmuls are bmms on ka.
    const TaskPlan* split = find_plan(got.tasks, "aten::split.Tensor");
    ASSERT_NE(split, nullptr);
    EXPECT_NE(split->config.find("metadata"), std::string::npos) << split->config;
    EXPECT_NE(split->fallback.find("ka has no kernel for aten::split.Tensor"), std::string::npos);
    const TaskPlan* contiguous = find_plan(got.tasks, "aten::contiguous");
    ASSERT_NE(contiguous, nullptr);
    EXPECT_NE(contiguous->provenance, db::Provenance::kFallback) << contiguous->fallback;
    EXPECT_EQ(contiguous->kernel, "ew_chain_f32");
    const TaskPlan* attention = find_plan(
        got.tasks,
        "fused::attention[aten::matmul+aten::mul.Scalar+aten::add.Tensor+aten::softmax.int+"
        "aten::matmul]");
    EXPECT_EQ(attention != nullptr, fusion);
    if (fusion) {
      ASSERT_NE(attention, nullptr);
      EXPECT_EQ(attention->kernel, "attention_f32_cpu");
      EXPECT_EQ(attention->shape_key.rfind("fused::attention(f32[" + std::to_string(batch) +
                                               ",4,24,16]s,f32[" + std::to_string(batch) + ",4,16,24]s",
                                           0),
                0U)
          << attention->shape_key;
      continue;
    }
    const TaskPlan* matmul = find_plan(got.tasks, "aten::matmul");
    ASSERT_NE(matmul, nullptr);
    if (batch == 1) {
      EXPECT_NE(matmul->provenance, db::Provenance::kFallback) << matmul->fallback;
      EXPECT_EQ(matmul->shape_key.rfind("aten::bmm(f32[4,24,16]", 0), 0U) << matmul->shape_key;
    } else {
      EXPECT_EQ(matmul->provenance, db::Provenance::kFallback);
      EXPECT_NE(matmul->fallback.find("cannot be viewed as one"), std::string::npos)
          << matmul->fallback;
    }
    const TaskPlan* linear = find_plan(got.tasks, "aten::linear");
    if (!fusion) {
      ASSERT_NE(linear, nullptr);
      EXPECT_NE(linear->provenance, db::Provenance::kFallback);
    }
  }
}

TEST(Fallback, ViewsBetweenAttentionsOpsMoveUpAndAttentionFuses) {
  // LLaMA's form: the mask is sliced between the division and the add. The slices read no
  // data, so lowering moves them up (Note [Hoisted metadata nodes]) and the five ops fuse.
  const Scripted s(R"TS(
def f(q: Tensor, k: Tensor, v: Tensor, mask: Tensor):
    T = q.size(2)
    s = torch.matmul(q, k.transpose(2, 3)) / 4.0
    s = s + mask[:T, :T]
    return torch.matmul(torch.softmax(s, dim=-1), v)
)TS",
                   "f");
  at::manual_seed(9);
  const auto heads = [](std::int64_t t) { return at::randn({2, t, 3, 16}).transpose(1, 2); };
  const at::Tensor mask =
      at::full({40, 40}, -std::numeric_limits<float>::infinity()).triu(1);  // causal, 40 long
  const std::vector<c10::IValue> inputs = {heads(33), heads(33), heads(33), mask};
  Runtime rt;
  const GraphResult got = rt.run_graph(*s.graph, inputs, {true});
  expect_outputs_match(got.outputs, s.reference(inputs));
  expect_every_node_planned(*s.graph, inputs, got.tasks);
  const TaskPlan* attention = find_plan(
      got.tasks,
      "fused::attention[aten::matmul+aten::div.Scalar+aten::add.Tensor+aten::softmax.int+"
      "aten::matmul]");
  ASSERT_NE(attention, nullptr);
  // The slices ran during extraction, before the attention's task.
  const TaskPlan* slice = find_plan(got.tasks, "aten::slice.Tensor");
  ASSERT_NE(slice, nullptr);
  EXPECT_LT(slice->nodes.front(), attention->nodes.front());
}

TEST(Fallback, AttentionScaledByA0DimTensorInputFuses) {
  // A traced model divides by a Python number as by a 0-dim float64 tensor (Note [Scale by a
  // 0-dim tensor]); as a graph input its value is there while extracting, so the product or
  // the division is attention's scale (the product with the scores as either operand).
  at::manual_seed(10);
  const auto heads = [](std::int64_t t) { return at::randn({2, t, 3, 16}).transpose(1, 2); };
  const at::Tensor mask = at::full({29, 29}, -std::numeric_limits<float>::infinity()).triu(1);
  Runtime rt;
  const auto expect_fused = [&](const char* scaled, double scale, const char* op) {
    const Scripted s(std::string(R"TS(
def f(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: Tensor):
    s = )TS") + scaled + R"TS(
    s = s + mask
    return torch.matmul(torch.softmax(s, dim=-1), v)
)TS",
                     "f");
    const std::vector<c10::IValue> in = {heads(29), heads(29), heads(29), mask,
                                         at::scalar_tensor(scale, at::kDouble)};
    const GraphResult got = rt.run_graph(*s.graph, in, {true});
    expect_outputs_match(got.outputs, s.reference(in));
    expect_every_node_planned(*s.graph, in, got.tasks);
    EXPECT_NE(find_plan(got.tasks, std::string("fused::attention[aten::matmul+") + op +
                                       "+aten::add.Tensor+aten::softmax.int+aten::matmul]"),
              nullptr)
        << scaled;
  };
  expect_fused("scale * torch.matmul(q, k.transpose(2, 3))", 0.25, "aten::mul.Tensor");
  expect_fused("torch.matmul(q, k.transpose(2, 3)) / scale", 4.0, "aten::div.Tensor");
}

TEST(Fallback, TensorDivisionRunsOnKa) {
  // aten::div.Tensor of float32 tensors, broadcasting, is ka's element-wise kernel; a float64
  // divisor is refused and runs on libtorch, unless it is 0-dim and final while extracting
  // (Note [0-dim operands as scalars]): a graph input, or what libtorch made of one then
  // (w * 2.0, a float64 product ka refuses: Note [Final data while extracting]).
  const Scripted s(R"TS(
def f(x: Tensor, y: Tensor, z: Tensor, w: Tensor):
    return x / y, x / z, x / w, x / (w * 2.0)
)TS",
                   "f");
  at::manual_seed(12);
  const std::vector<c10::IValue> inputs = {at::randn({5, 7}), at::rand({7}) + 0.5,
                                           at::rand({7}, at::kDouble) + 0.5,
                                           at::scalar_tensor(1.25, at::kDouble)};
  Runtime rt;
  const GraphResult got = rt.run_graph(*s.graph, inputs, {false});
  expect_outputs_match(got.outputs, s.reference(inputs));
  std::vector<const TaskPlan*> divs;
  for (const TaskPlan& t : got.tasks) {
    if (t.pattern == "aten::div.Tensor") divs.push_back(&t);
  }
  ASSERT_EQ(divs.size(), 4U);
  EXPECT_NE(divs[0]->provenance, db::Provenance::kFallback) << divs[0]->fallback;
  EXPECT_EQ(divs[1]->provenance, db::Provenance::kFallback);
  EXPECT_NE(divs[1]->fallback.find("Double"), std::string::npos) << divs[1]->fallback;
  EXPECT_NE(divs[2]->provenance, db::Provenance::kFallback) << divs[2]->fallback;
  EXPECT_NE(divs[3]->provenance, db::Provenance::kFallback) << divs[3]->fallback;
  const TaskPlan* doubled = find_plan(got.tasks, "aten::mul.Scalar");
  ASSERT_NE(doubled, nullptr);
  EXPECT_EQ(doubled->provenance, db::Provenance::kFallback);
  EXPECT_EQ(doubled->config, "reads only final data: ran during extraction");
}

TEST(Fallback, TanhAndIntegerPowersRunOnKa) {
  // aten::tanh and pow.Tensor_Scalar with exponent 2 or 3 are ka's element-wise ops (Note
  // [Integer powers]); another exponent, or a tensor of another dtype, runs on libtorch.
  const Scripted s(R"TS(
def f(x: Tensor, d: Tensor):
    return torch.tanh(x), torch.pow(x, 2), torch.pow(x, 3.0), torch.pow(x.abs(), 0.5), torch.tanh(d)
)TS",
                   "f");
  at::manual_seed(13);
  // Wide enough for every vector width and a tail, with tanh's saturated range included.
  const at::Tensor x =
      at::cat({at::randn({3, 37}) * 4.0, at::tensor({-30.0F, 30.0F, 0.0F}).view({3, 1})}, 1);
  const std::vector<c10::IValue> inputs = {x, at::randn({4}, at::kDouble)};
  Runtime rt;
  const GraphResult got = rt.run_graph(*s.graph, inputs, {false});
  expect_outputs_match(got.outputs, s.reference(inputs), 1e-5);
  std::vector<const TaskPlan*> ops;
  for (const TaskPlan& t : got.tasks) {
    if (t.pattern == "aten::tanh" || t.pattern == "aten::pow.Tensor_Scalar") ops.push_back(&t);
  }
  ASSERT_EQ(ops.size(), 5U);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(ops[i]->provenance, db::Provenance::kFallback) << i << ": " << ops[i]->fallback;
  }
  EXPECT_EQ(ops[3]->provenance, db::Provenance::kFallback);
  EXPECT_NE(ops[3]->fallback.find("exponents 2 and 3"), std::string::npos) << ops[3]->fallback;
  EXPECT_EQ(ops[4]->provenance, db::Provenance::kFallback);
  // The integer powers are ATen's own products, bit for bit.
  const std::vector<c10::IValue> outs = items(got.outputs);
  EXPECT_TRUE(at::equal(outs[1].toTensor(), at::pow(x, 2)));
  EXPECT_TRUE(at::equal(outs[2].toTensor(), at::pow(x, 3.0)));
}

TEST(Fallback, ExpAndNegRunOnKaInOneChain) {
  // exp and neg are ka's element-wise ops: with the other element-wise nodes around them they
  // are one fused chain; exp of a float64 tensor runs on libtorch.
  const Scripted s(R"TS(
def f(x: Tensor, d: Tensor):
    return torch.exp(-x) * 0.5 + torch.neg(torch.exp(x)), torch.exp(d), -x
)TS",
                   "f");
  at::manual_seed(15);
  // Every vector width and a tail, with exp's overflow (inf), underflow (0) and NaN included.
  const at::Tensor x = at::cat(
      {at::randn({3, 37}) * 4.0,
       at::tensor({-100.0F, 100.0F, std::numeric_limits<float>::quiet_NaN()}).view({3, 1})},
      1);
  const std::vector<c10::IValue> inputs = {x, at::randn({4}, at::kDouble)};
  Runtime rt;
  const GraphResult got = rt.run_graph(*s.graph, inputs);
  const std::vector<c10::IValue> want = items(s.reference(inputs));
  const std::vector<c10::IValue> outs = items(got.outputs);
  ASSERT_EQ(outs.size(), 3U);
  EXPECT_TRUE(at::allclose(outs[0].toTensor(), want[0].toTensor(), 1e-5, 1e-5, /*equal_nan=*/true));
  EXPECT_TRUE(at::allclose(outs[1].toTensor(), want[1].toTensor()));
  EXPECT_TRUE(at::allclose(outs[2].toTensor(), want[2].toTensor(), 0.0, 0.0, /*equal_nan=*/true));
  bool chain = false;
  int fallbacks = 0;
  for (const TaskPlan& t : got.tasks) {
    if (t.provenance == db::Provenance::kFallback && t.pattern.rfind("aten::", 0) == 0) {
      ++fallbacks;
      EXPECT_EQ(t.pattern, "aten::exp") << t.fallback;
    }
    chain = chain || (t.pattern.rfind("fused::ew_chain[", 0) == 0 &&
                      t.pattern.find("aten::exp") != std::string::npos &&
                      t.pattern.find("aten::neg") != std::string::npos);
  }
  EXPECT_TRUE(chain);
  EXPECT_EQ(fallbacks, 1);
}

TEST(Fallback, TanhGeluAsGpt2WritesItIsOneFusedChain) {
  // GPT-2's models write the tanh-approximate GELU out (transformers' NewGELUActivation):
  // with tanh and the cube on ka, everything after the first multiply is one element-wise
  // chain and nothing runs on libtorch.
  const Scripted s(R"TS(
def f(h: Tensor):
    return 0.5 * h * (1.0 + torch.tanh(0.7978845608028654 * (h + 0.044715 * torch.pow(h, 3.0))))
)TS",
                   "f");
  at::manual_seed(14);
  const std::vector<c10::IValue> inputs = {at::randn({2, 33, 70}) * 3.0};
  Runtime rt;
  const GraphResult got = rt.run_graph(*s.graph, inputs);
  expect_outputs_match(got.outputs, s.reference(inputs), 1e-5);
  bool chain_with_tanh = false;
  for (const TaskPlan& t : got.tasks) {
    EXPECT_NE(t.provenance, db::Provenance::kFallback) << t.pattern << ": " << t.fallback;
    chain_with_tanh = chain_with_tanh || (t.pattern.rfind("fused::ew_chain[", 0) == 0 &&
                                          t.pattern.find("aten::tanh") != std::string::npos &&
                                          t.pattern.find("aten::pow") != std::string::npos);
  }
  EXPECT_TRUE(chain_with_tanh);
}

TEST(Fallback, A0DimTensorANodeMakesIsNoAttentionScale) {
  // The divisor is computed by the graph: its data exists only once its node has run, so the
  // attention packer could not read it while extracting. Nothing fuses as attention, and the
  // result is still libtorch's.
  const Scripted s(R"TS(
def f(q: Tensor, k: Tensor, v: Tensor, scale: Tensor):
    d = scale * 2.0
    s = torch.matmul(q, k.transpose(2, 3)) / d
    return torch.matmul(torch.softmax(s, dim=-1), v)
)TS",
                   "f");
  at::manual_seed(11);
  const auto heads = [](std::int64_t t) { return at::randn({1, t, 2, 16}).transpose(1, 2); };
  const std::vector<c10::IValue> inputs = {heads(20), heads(20), heads(20),
                                           at::scalar_tensor(2.0, at::kFloat)};
  Runtime rt;
  const GraphResult got = rt.run_graph(*s.graph, inputs, {true});
  expect_outputs_match(got.outputs, s.reference(inputs));
  expect_every_node_planned(*s.graph, inputs, got.tasks);
  for (const TaskPlan& t : got.tasks) {
    EXPECT_EQ(t.pattern.rfind("fused::attention", 0), std::string::npos) << t.pattern;
  }
}

TEST(Fallback, DataFallbacksOnFinalDataRunWhileExtracting) {
  // A traced model's size arithmetic: pow of NumToTensor(size) reads only data made while
  // extracting, so it runs then, with no wait for the tasks before it (Note [Final data while
  // extracting]). Where a node writes an argument (relu_ here) it waits, as any data fallback.
  const auto ir = [](const char* relu) {
    return std::string(R"IR(
graph(%x : Tensor):
  %m1 : int = prim::Constant[value=-1]()
  %half : float = prim::Constant[value=0.5]()
  %y : Tensor = )IR") + relu + R"IR((%x)
  %d : int = aten::size(%x, %m1)
  %dt : Tensor = prim::NumToTensor(%d)
  %r : Tensor = aten::pow(%dt, %half)
  %z : Tensor = aten::div(%y, %r)
  return (%z)
)IR";
  };
  Runtime rt;
  for (const char* relu : {"aten::relu", "aten::relu_"}) {
    SCOPED_TRACE(relu);
    at::manual_seed(13);
    const at::Tensor x = at::randn({6, 49});
    const at::Tensor want = at::relu(x) / 7.0;
    const GraphResult got = rt.run_graph(ir(relu), {x.clone()}, {true});
    ASSERT_EQ(got.outputs.size(), 1U);
    EXPECT_TRUE(at::allclose(got.outputs[0].toTensor(), want));
    const TaskPlan* pow = find_plan(got.tasks, "aten::pow.Tensor_Scalar");
    ASSERT_NE(pow, nullptr);
    EXPECT_EQ(pow->provenance, db::Provenance::kFallback);
    EXPECT_EQ(pow->config, std::string(relu) == "aten::relu"
                               ? "reads only final data: ran during extraction"
                               : "reads data: ran after every earlier task");
    // The division by the 0-dim result runs on ka (fused with relu where relu is not in
    // place).
    const auto div = std::find_if(got.tasks.begin(), got.tasks.end(), [](const TaskPlan& t) {
      return t.pattern.find("aten::div.Tensor") != std::string::npos;
    });
    ASSERT_NE(div, got.tasks.end());
    EXPECT_NE(div->provenance, db::Provenance::kFallback) << div->fallback;
  }
}

TEST(Fallback, ContiguousCopiesAStridedTensorOnKaAndAliasesAContiguousOne) {
  // Note [contiguous as a copy]: a strided input is copied by ka's element-wise kernel (fused
  // with what follows); a contiguous one is returned as it is, by libtorch, so the in-place
  // add through it reaches x, as in libtorch's own run.
  const Scripted s(R"TS(
def f(x: Tensor):
    z = x.contiguous()
    z.add_(1.0)
    y = x.transpose(0, 1).contiguous() * 2.0
    return y, x
)TS",
                   "f");
  at::manual_seed(14);
  const at::Tensor x = at::randn({37, 29});
  Runtime rt;
  for (const bool fusion : {true, false}) {
    SCOPED_TRACE(fusion ? "fused" : "unfused");
    const std::vector<c10::IValue> inputs = {x.clone()};
    const GraphResult got = rt.run_graph(*s.graph, inputs, {fusion});
    expect_outputs_match(got.outputs, s.reference({x.clone()}));
    EXPECT_TRUE(at::allclose(inputs[0].toTensor(), x + 1.0));
    std::vector<const TaskPlan*> copies;
    for (const TaskPlan& t : got.tasks) {
      if (t.pattern.find("aten::contiguous") != std::string::npos) copies.push_back(&t);
    }
    ASSERT_EQ(copies.size(), 2U);
    EXPECT_EQ(copies[0]->pattern, "aten::contiguous");
    EXPECT_EQ(copies[0]->provenance, db::Provenance::kFallback);
    EXPECT_NE(copies[0]->fallback.find("already contiguous"), std::string::npos)
        << copies[0]->fallback;
    EXPECT_EQ(copies[1]->pattern, fusion ? "fused::ew_chain[aten::contiguous+aten::mul.Scalar]"
                                         : "aten::contiguous");
    EXPECT_EQ(copies[1]->kernel, "ew_chain_f32");
  }
}

TEST(Fallback, MetadataNodesDoNotMoveAboveAnInPlaceOp) {
  // unsqueeze_ changes x's sizes in place: the size read after it must not move above it.
  const Scripted s(R"TS(
def f(x: Tensor):
    a = x.size(0)
    x.unsqueeze_(0)
    b = x.size(0)
    return x * b + a
)TS",
                   "f");
  const std::vector<c10::IValue> inputs = {at::randn({5, 3})};
  Runtime rt;
  const auto want = s.reference({at::Tensor(inputs[0].toTensor().clone())});
  const GraphResult got = rt.run_graph(*s.graph, inputs, {true});
  expect_outputs_match(got.outputs, want);
  expect_every_node_planned(*s.graph, {at::randn({5, 3})}, got.tasks);
}

TEST(Fallback, AWriteThroughAViewIsOrderedByTheViewsMemory) {
  // y = relu(x); v = y.view(-1); v += z (ka's in-place add through the view); w = y * 2.
  // The view runs during extraction, before relu has written y: only its aliasing of y's
  // memory orders the add after relu and the mul after the add.
  const Scripted s(R"TS(
def f(x: Tensor, z: Tensor):
    y = torch.relu(x)
    v = y.view([-1])
    v.add_(z)
    return y * 2.0, v
)TS",
                   "f");
  at::manual_seed(3);
  const std::vector<c10::IValue> inputs = {at::randn({8, 16}), at::randn({128})};
  const auto want = s.reference(inputs);
  Runtime rt;
  const GraphResult got = rt.run_graph(*s.graph, inputs);
  expect_outputs_match(got.outputs, want, 0);
  const TaskPlan* view = find_plan(got.tasks, "aten::view");
  ASSERT_NE(view, nullptr);
  EXPECT_NE(view->config.find("metadata"), std::string::npos);
  const TaskPlan* add = find_plan(got.tasks, "aten::add_.Tensor");
  ASSERT_NE(add, nullptr);
  EXPECT_NE(add->provenance, db::Provenance::kFallback);
  EXPECT_FALSE(add->dependencies.empty());
}

TEST(Fallback, AViewThatCopiesRunsAgainAfterItsInputIsWritten) {
  // reshape of a transposed tensor cannot be a view: it copies, so it must read relu's output
  // after relu ran, though its schema makes it a view.
  const Scripted s(R"TS(
def f(x: Tensor):
    y = torch.relu(x).t()
    return torch.sigmoid(y.reshape([-1]))
)TS",
                   "f");
  at::manual_seed(4);
  const std::vector<c10::IValue> inputs = {at::randn({6, 10})};
  const auto want = s.reference(inputs);
  Runtime rt;
  const GraphResult got = rt.run_graph(*s.graph, inputs);
  expect_outputs_match(got.outputs, want, 1e-6);
  const TaskPlan* reshape = find_plan(got.tasks, "aten::reshape");
  ASSERT_NE(reshape, nullptr);
  EXPECT_NE(reshape->config.find("reads data"), std::string::npos) << reshape->config;
}

TEST(Fallback, ALinearOverATransposedActivationReadsItAfterItIsWritten) {
  // MLP-Mixer's token mixing: linear over a transposed activation, which no [M, K] view
  // describes. Copied while extracting, it would be read before relu wrote it; libtorch's
  // linear runs it after relu instead. Over a graph input (final data) ka copies it and runs
  // the GEMM.
  const Scripted s(R"TS(
def f(x: Tensor, w: Tensor, b: Tensor):
    y = torch.relu(x).transpose(1, 2)
    return torch.linear(y, w, b), torch.linear(x.transpose(1, 2), w, b)
)TS",
                   "f");
  at::manual_seed(4);
  const std::vector<c10::IValue> inputs = {at::randn({2, 64, 40}), at::randn({24, 64}),
                                           at::randn({24})};
  const auto want = s.reference(inputs);
  Runtime rt;
  for (const bool fusion : {false, true}) {
    const GraphResult got = rt.run_graph(*s.graph, inputs, {fusion});
    expect_outputs_match(got.outputs, want);
    std::vector<const TaskPlan*> linears;
    for (const TaskPlan& p : got.tasks) {
      if (p.pattern == "aten::linear") linears.push_back(&p);
    }
    ASSERT_EQ(linears.size(), 2U);
    EXPECT_EQ(linears[0]->provenance, db::Provenance::kFallback);
    EXPECT_NE(linears[0]->fallback.find("no [M, K] view"), std::string::npos)
        << linears[0]->fallback;
    EXPECT_NE(linears[1]->provenance, db::Provenance::kFallback);
  }
}

TEST(Fallback, ARefusalIsRememberedOnlyForArgumentsLikeThoseRefused) {
  // Note [Refusals remembered]: a lowered graph run again with arguments of the refused
  // types and shapes falls back at once with the same reason; other arguments are asked anew.
  const Scripted s(R"TS(
def f(x: Tensor, y: Tensor):
    return torch.mul(x, y)
)TS",
                   "f");
  const at::Tensor a = at::arange(12, at::kLong).reshape({3, 4});
  const at::Tensor b = at::arange(4, at::kLong) - 2;
  extractor::OpGraph g = Runtime::lower(*s.graph, {a, b});
  Runtime rt;
  const auto run = [&](const at::Tensor& x, const at::Tensor& y) {
    g.values[0] = x;
    g.values[1] = y;
    const GraphResult got = rt.run_lowered(g, {true});
    expect_outputs_match(got.outputs, s.reference({x, y}), 1e-6);
    const TaskPlan* mul = find_plan(got.tasks, "aten::mul.Tensor");
    EXPECT_NE(mul, nullptr);
    return mul == nullptr ? TaskPlan{} : *mul;
  };
  const TaskPlan first = run(a, b);
  EXPECT_EQ(first.provenance, db::Provenance::kFallback);
  EXPECT_NE(first.fallback.find("Long"), std::string::npos) << first.fallback;
  ASSERT_EQ(g.refusals.size(), 1U);
  const std::vector<std::int64_t> key = g.refusals[0].key;
  EXPECT_FALSE(key.empty());
  const TaskPlan again = run(a + 1, b * 3);
  EXPECT_EQ(again.provenance, db::Provenance::kFallback);
  EXPECT_EQ(again.fallback, first.fallback);
  EXPECT_EQ(g.refusals[0].key, key);
  const TaskPlan floats = run(a.to(at::kFloat), b.to(at::kFloat));
  EXPECT_NE(floats.provenance, db::Provenance::kFallback) << floats.fallback;
  const TaskPlan other_shape = run(at::arange(8, at::kLong).reshape({2, 4}), b);
  EXPECT_EQ(other_shape.provenance, db::Provenance::kFallback);
  EXPECT_NE(g.refusals[0].key, key);
}

TEST(Fallback, ArgumentsKaRefusesRunLibtorchsKernel) {
  // ka's GEMM serves float32; a float64 mm is libtorch's, and the graph still runs.
  const Scripted s(R"TS(
def f(a: Tensor, b: Tensor, c: Tensor):
    return torch.mm(a, b), torch.mm(c, c)
)TS",
                   "f");
  at::manual_seed(5);
  const std::vector<c10::IValue> inputs = {at::randn({5, 7}, at::kDouble),
                                           at::randn({7, 3}, at::kDouble), at::randn({4, 4})};
  const auto want = s.reference(inputs);
  Runtime rt;
  const GraphResult got = rt.run_graph(*s.graph, inputs);
  expect_outputs_match(got.outputs, want);
  ASSERT_GE(got.tasks.size(), 2U);
  EXPECT_EQ(got.tasks[0].pattern, "aten::mm");
  EXPECT_EQ(got.tasks[0].provenance, db::Provenance::kFallback);
  EXPECT_NE(got.tasks[0].fallback.find("ka refused it"), std::string::npos)
      << got.tasks[0].fallback;
  EXPECT_EQ(got.tasks[1].pattern, "aten::mm");
  EXPECT_NE(got.tasks[1].provenance, db::Provenance::kFallback);
}

TEST(Fallback, MatmulRunsOnKaWhereItIsABmmAndOnLibtorchElsewhere) {
  const Scripted s(R"TS(
def f(q: Tensor, k: Tensor, x: Tensor, w: Tensor, p: Tensor):
    a = torch.matmul(q, k.transpose(-2, -1))
    b = torch.matmul(x, w)
    c = torch.matmul(q, w)
    d = torch.matmul(p.transpose(0, 1), k)
    return a, b, c, d
)TS",
                   "f");
  at::manual_seed(9);
  // q, k: [2, 3, 5, 4] (batch 2 x 3 heads); w: [4, 6]; p: [3, 2, 5, 5], whose transpose's
  // batch dimensions no view can merge.
  const std::vector<c10::IValue> inputs = {at::randn({2, 3, 5, 4}), at::randn({2, 3, 5, 4}),
                                           at::randn({7, 4}), at::randn({4, 6}),
                                           at::randn({3, 2, 5, 5})};
  const auto want = s.reference(inputs);
  Runtime rt;
  const GraphResult got = rt.run_graph(*s.graph, inputs);
  expect_outputs_match(got.outputs, want);
  std::vector<const TaskPlan*> matmuls;
  for (const TaskPlan& p : got.tasks) {
    if (p.pattern == "aten::matmul") matmuls.push_back(&p);
  }
  ASSERT_EQ(matmuls.size(), 4U);
  EXPECT_NE(matmuls[0]->provenance, db::Provenance::kFallback) << matmuls[0]->fallback;
  EXPECT_EQ(matmuls[0]->shape_key.rfind("aten::bmm(f32[6,5,4]c,f32[6,4,5]", 0), 0U)
      << matmuls[0]->shape_key;
  for (int i : {1, 2}) {
    EXPECT_EQ(matmuls[i]->provenance, db::Provenance::kFallback);
    EXPECT_NE(matmuls[i]->fallback.find("one rank >= 3"), std::string::npos)
        << matmuls[i]->fallback;
  }
  EXPECT_EQ(matmuls[3]->provenance, db::Provenance::kFallback);
  EXPECT_NE(matmuls[3]->fallback.find("cannot be viewed as one"), std::string::npos)
      << matmuls[3]->fallback;
}

TEST(Fallback, MultiOutputNodesAndTupleGlueRun) {
  const Scripted s(R"TS(
def f(x: Tensor):
    a, b = torch.chunk(torch.relu(x), 2, 1)
    values, indices = torch.max(a, 1)
    t = (b, values)
    return t[0] + 1.0, t[1], indices
)TS",
                   "f");
  at::manual_seed(6);
  const std::vector<c10::IValue> inputs = {at::randn({5, 8})};
  const auto want = s.reference(inputs);
  Runtime rt;
  const GraphResult got = rt.run_graph(*s.graph, inputs);
  expect_outputs_match(got.outputs, want, 0);
  expect_every_node_planned(*s.graph, inputs, got.tasks);
}

TEST(Fallback, ControlFlowRunsTheGraphInLibtorchsInterpreter) {
  // The trip count and the condition come from the data: nothing the inputs' types or values
  // settle before the run.
  const Scripted s(R"TS(
def f(x: Tensor, n: int):
    for i in range(int(x.abs().sum().item()) % 3 + n):
        x = torch.relu(x) - 0.5
    if bool(x.sum() > 0):
        x = x * 2.0
    return x
)TS",
                   "f");
  at::manual_seed(7);
  const std::vector<c10::IValue> inputs = {at::randn({4, 4}), 1};
  const auto want = s.reference(inputs);
  Runtime rt;
  const GraphResult got = rt.run_graph(*s.graph, inputs);
  expect_outputs_match(got.outputs, want, 0);
  ASSERT_EQ(got.tasks.size(), 1U);
  EXPECT_EQ(got.tasks[0].kernel, "torch::jit interpreter");
  EXPECT_EQ(got.tasks[0].provenance, db::Provenance::kFallback);
  EXPECT_NE(got.tasks[0].fallback.find("prim::Loop"), std::string::npos) << got.tasks[0].fallback;
  EXPECT_THROW(Runtime::lower(*s.graph, inputs), NotImplementedError);
}

// Note [Control flow settled by the inputs]: an optional mask that is None or a tensor, a
// loop over an int argument and an if on a flag fold away on the inputs given, and ka runs
// what is left; the interpreter takes the same branches.
TEST(Fallback, ControlFlowTheInputsSettleRunsOnKa) {
  const Scripted s(R"TS(
def f(x: Tensor, mask: Optional[Tensor], n: int, residual: bool):
    y = x
    for i in range(n):
        y = torch.relu(y) - 0.5
    if mask is not None:
        y = y + mask
    if residual:
        y = y + x
    return y * 2.0
)TS",
                   "f");
  at::manual_seed(7);
  const at::Tensor x = at::randn({4, 8});
  const at::Tensor mask = at::randn({4, 8});
  Runtime rt;
  for (const std::vector<c10::IValue>& inputs :
       {std::vector<c10::IValue>{x, c10::IValue(), 3, true},
        std::vector<c10::IValue>{x, mask, 2, false}, std::vector<c10::IValue>{x, mask, 0, true}}) {
    SCOPED_TRACE("n = " + std::to_string(inputs[2].toInt()) +
                 (inputs[1].isNone() ? ", no mask" : ", a mask"));
    const auto want = s.reference(inputs);
    for (bool fusion : {true, false}) {
      const GraphResult got = rt.run_graph(*s.graph, inputs, {fusion});
      expect_outputs_match(got.outputs, want, 1e-6);
      for (const TaskPlan& p : got.tasks) EXPECT_NE(p.kernel, "torch::jit interpreter");
    }
    std::string why;
    const std::optional<extractor::OpGraph> g = Runtime::try_lower(*s.graph, inputs, why);
    ASSERT_TRUE(g.has_value()) << why;
    // The loop unrolled: one relu per step, nothing of the branches not taken.
    const auto relus = std::count_if(g->nodes.begin(), g->nodes.end(), [](const auto& n) {
      return n.signature == "aten::relu";
    });
    EXPECT_EQ(relus, inputs[2].toInt());
  }
  // A loop too long to unroll stays control flow, for libtorch's interpreter.
  std::string why;
  EXPECT_FALSE(Runtime::try_lower(*s.graph, {x, mask, 1000000, true}, why).has_value());
  EXPECT_NE(why.find("prim::Loop"), std::string::npos) << why;
}

TEST(Fallback, ADictOfOutputsIsGlueKaRunsItself) {
  // A model returning a dict, as Hugging Face's ModelOutput does: the graph still lowers, and
  // the dict keeps its keys in order with ka's tensors as values.
  const Scripted s(R"TS(
def f(x: Tensor, w: Tensor):
    h = torch.relu(torch.matmul(x, w))
    return {"logits": h * 2.0, "hidden": h, "rows": x.sum(1)}
)TS",
                   "f");
  at::manual_seed(8);
  const std::vector<c10::IValue> inputs = {at::randn({6, 16}), at::randn({16, 8})};
  std::vector<c10::IValue> stack = inputs;
  s.fn->run(stack);
  const c10::Dict<c10::IValue, c10::IValue> want = stack.at(0).toGenericDict();
  std::string why;
  ASSERT_TRUE(Runtime::try_lower(*s.graph, inputs, why).has_value()) << why;
  Runtime rt;
  const GraphResult got = rt.run_graph(*s.graph, inputs);
  ASSERT_EQ(got.outputs.size(), 1U);
  ASSERT_TRUE(got.outputs[0].isGenericDict());
  const c10::Dict<c10::IValue, c10::IValue> dict = got.outputs[0].toGenericDict();
  ASSERT_EQ(dict.size(), want.size());
  auto w = want.begin();
  for (const auto& entry : dict) {
    EXPECT_EQ(entry.key().toStringRef(), w->key().toStringRef());
    const at::Tensor g = entry.value().toTensor();
    EXPECT_TRUE(at::allclose(g, w->value().toTensor(), 1e-5, 1e-5)) << entry.key().toStringRef();
    ++w;
  }
  EXPECT_NE(find_plan(got.tasks, "aten::relu"), nullptr) << "relu ran on ka";
  expect_every_node_planned(*s.graph, inputs, got.tasks);
}

// The global modes and an input's requires_grad settle control flow as the interpreter would
// read them in the same mode (nn.MultiheadAttention's fast-path checks read all three).
TEST(Fallback, GradModeAndRequiresGradSettleControlFlowAsTheInterpreterReadsThem) {
  const Scripted s(R"TS(
def f(x: Tensor, w: Tensor):
    y = x * 3.0
    if torch.is_grad_enabled():
        y = y + 1.0
    if w.requires_grad:
        y = y * w
    if torch.is_autocast_enabled():
        y = y - 5.0
    return y
)TS",
                   "f");
  at::manual_seed(7);
  Runtime rt;
  for (const bool grad_mode : {true, false}) {
    for (const bool w_grad : {true, false}) {
      SCOPED_TRACE(std::string(grad_mode ? "grad mode" : "no grad") +
                   (w_grad ? ", w requires grad" : ""));
      const c10::AutoGradMode mode(grad_mode);
      const std::vector<c10::IValue> inputs = {at::randn({3, 4}),
                                               at::randn({3, 4}).requires_grad_(w_grad)};
      const auto want = s.reference(inputs);
      const GraphResult got = rt.run_graph(*s.graph, inputs);
      expect_outputs_match(got.outputs, want, 1e-6);
      for (const TaskPlan& p : got.tasks) EXPECT_NE(p.kernel, "torch::jit interpreter");
    }
  }
}

TEST(Fallback, AnInterpretedGraphIsCompiledOnceAndRunsOnNewInputs) {
  const Scripted s(R"TS(
def f(x: Tensor, n: int):
    for i in range(n):
        if bool(x.sum() > 0):
            x = x * 2.0 + 1.0
        else:
            x = x - 1.0
    return x
)TS",
                   "f");
  std::string why;
  ASSERT_FALSE(Runtime::try_lower(*s.graph, {at::ones({2, 2}), 3}, why).has_value());
  const Runtime::InterpretedGraph compiled = Runtime::interpret(*s.graph, why);
  EXPECT_EQ(compiled.code->num_inputs(), 2U);
  for (const std::int64_t n : {0, 1, 4}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const std::vector<c10::IValue> inputs = {at::randn({3, 5}), n};
    const GraphResult got = Runtime::run_in_interpreter(compiled, inputs);
    expect_outputs_match(got.outputs, s.reference(inputs), 0);
    ASSERT_EQ(got.tasks.size(), 1U);
    EXPECT_NE(got.tasks[0].fallback.find(why), std::string::npos) << got.tasks[0].fallback;
  }
  EXPECT_THROW(Runtime::run_in_interpreter(compiled, {at::ones({2})}), ValueError);
}

TEST(Fallback, AFailingFallbackNamesItsNode) {
  const Scripted s(R"TS(
def f(a: Tensor, b: Tensor):
    return torch.cat([torch.relu(a), b], 1)
)TS",
                   "f");
  Runtime rt;
  try {
    rt.run_graph(*s.graph, {at::ones({2, 3}), at::ones({4, 3})});
    ADD_FAILURE() << "cat of mismatched sizes ran";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("aten::cat"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("libtorch"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ka::runtime
