// The extraction machinery: packing owns its scalars, the registry's exact-signature rules,
// configs with provenance from a table, fusion rules, and the JSON dump.
#include <ka/extractor/detail/ops.hpp>

#include <ka/core/error.hpp>
#include <ka/extractor/extractor.hpp>
#include <ka/extractor/fusion.hpp>
#include <ka/kernels/elementwise.hpp>
#include <ka/kernels/gemm.hpp>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>

namespace ka::extractor {
namespace {

// Packs add.Tensor(a, b, alpha) with the arguments on this function's stack, which is gone
// (and overwritten) by the time the caller runs the kernel.
__attribute__((noinline)) void pack_on_a_dying_stack(const at::Tensor& a, const at::Tensor& b,
                                                     double alpha, ParamBuffer& buf,
                                                     detail::Packed& out) {
  c10::IValue args[3] = {a, b, alpha};
  const c10::IValue* ptrs[3] = {&args[0], &args[1], &args[2]};
  const detail::NodeArgs node{detail::find_spec("aten::add.Tensor"), ptrs, 3, -1};
  detail::pack_group({FusionKind::kNone, &node, 1}, buf, out);
}

__attribute__((noinline)) void scribble_on_the_stack() {
  volatile char junk[4096];
  std::memset(const_cast<char*>(junk), 0x7f, sizeof(junk));
}

TEST(Packing, ScalarsLiveInTheParamBufferNotOnTheStack) {
  const at::Tensor a = at::randn({5, 8});
  const at::Tensor b = at::randn({8});
  ParamBuffer buf;
  detail::Packed packed;
  pack_on_a_dying_stack(a, b, 3.5, buf, packed);
  scribble_on_the_stack();
  auto* args = static_cast<const kernels::ElementwiseArgs*>(packed.args);
  EXPECT_TRUE(buf.owns_inline(args));
  LaunchConfig config;
  config.set("block_elems", 4096).set("threads", 1);
  config = kernels::elementwise_f32_cpu_descriptor().complete(
      ShapeKey("aten::add.Tensor", {{DType::kFloat32, {5, 8}, true}, {DType::kFloat32, {8}, true}}),
      config);
  ASSERT_TRUE(kernels::elementwise_f32_cpu(*args, config).is_ok());
  EXPECT_TRUE(at::allclose(packed.result, a + 3.5 * b));
  // The ranges: a and b read, the output written.
  ASSERT_EQ(packed.num_ranges, 3);
  int writes = 0;
  for (int i = 0; i < packed.num_ranges; ++i) writes += packed.ranges[static_cast<std::size_t>(i)].writes();
  EXPECT_EQ(writes, 1);
}

TEST(Packing, InPlaceSelfIsReadAndWritten) {
  at::Tensor x = at::randn({4, 4});
  const at::Tensor y = at::randn({4, 4});
  c10::IValue args[3] = {x, y, 1};
  const c10::IValue* ptrs[3] = {&args[0], &args[1], &args[2]};
  const detail::NodeArgs node{detail::find_spec("aten::add_.Tensor"), ptrs, 3, -1};
  ParamBuffer buf;
  detail::Packed packed;
  detail::pack_group({FusionKind::kNone, &node, 1}, buf, packed);
  bool self_rw = false;
  for (int i = 0; i < packed.num_ranges; ++i) {
    const MemRange& r = packed.ranges[static_cast<std::size_t>(i)];
    if (r.base == reinterpret_cast<std::uintptr_t>(x.data_ptr())) {
      self_rw = r.access == Access::kReadWrite;
    }
  }
  EXPECT_TRUE(self_rw);
  EXPECT_TRUE(packed.result.is_same(x));
}

TEST(Packing, RangeOfCoversStridedViews) {
  const at::Tensor base = at::zeros({10, 10});
  const MemRange r = detail::range_of(base.t(), Access::kRead);
  EXPECT_EQ(r.base, reinterpret_cast<std::uintptr_t>(base.data_ptr()));
  EXPECT_EQ(r.bytes, 100 * sizeof(float));
  const MemRange col = detail::range_of(base.select(1, 3), Access::kRead);
  EXPECT_EQ(col.bytes, (9 * 10 + 1) * sizeof(float));
}

TEST(KernelRegistry, ExactSignaturesAndAnExplicitDefault) {
  KernelRegistry reg(DeviceType::kCPU);
  const auto& d = kernels::elementwise_f32_cpu_descriptor();
  reg.add({"aten::add.Tensor", DeviceType::kCPU, &d, {}, false});
  EXPECT_EQ(reg.find("aten::add.Tensor").descriptor, &d);
  try {
    (void)reg.find("aten::add.Scalar");
    ADD_FAILURE() << "add.Scalar must not fall back to add.Tensor";
  } catch (const NotImplementedError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("kernel not found for aten::add.Scalar on cpu"), std::string::npos) << what;
    EXPECT_NE(what.find("aten::add.Tensor"), std::string::npos) << what;
  }
  reg.set_default({"default", DeviceType::kCPU, &d, {}, false});
  const KernelEntry& e = reg.find("aten::add.Scalar");
  EXPECT_TRUE(e.is_default);
  EXPECT_EQ(reg.find_exact("aten::add.Scalar"), nullptr);
  EXPECT_THROW(reg.add({"x::y", DeviceType::kCUDA, &d, {}, false}), ValueError);
}

TEST(Extractor, ConfigsComeFromTheTableWithProvenance) {
  Extractor ex;
  const at::Tensor a = at::randn({64, 48});
  const at::Tensor b = at::randn({64, 48});
  c10::IValue args[3] = {a, b, 1};
  const OpHandle add = ex.resolve("aten::add.Tensor");
  ex.call(add, args, 3);
  auto dump = nlohmann::json::parse(ex.dump_extraction_context());
  EXPECT_EQ(dump["provenance"], "heuristic");
  EXPECT_EQ(dump["kernel"], kernels::elementwise_f32_cpu_descriptor().name);
  EXPECT_EQ(dump["shape_key"], "aten::add.Tensor(f32[64,48]c,f32[64,48]c)");
  EXPECT_EQ(dump["mem_ranges"].size(), 3U);

  const auto& d = kernels::elementwise_f32_cpu_descriptor();
  db::Recommendation row;
  row.fingerprint = "test-device";
  row.op = "aten::add.Tensor";
  row.shape_key = "aten::add.Tensor(f32[64,48]c,f32[64,48]c)";
  row.kernel = d.name;
  row.kernel_version = d.version;
  row.config.set("block_elems", 1024).set("threads", 1);
  ex.set_table(std::make_shared<db::RecommendationTable>(
      "test-device", std::vector<db::Recommendation>{row}, db::KernelVersions{{d.name, d.version}}));
  const at::Tensor got = ex.call(add, args, 3).toTensor();
  EXPECT_TRUE(at::allclose(got, a + b));
  dump = nlohmann::json::parse(ex.dump_extraction_context());
  EXPECT_EQ(dump["provenance"], "exact");
  EXPECT_NE(dump["config"].get<std::string>().find("block_elems=1024"), std::string::npos)
      << dump["config"];
  // Another shape of the same op: the nearest tuned shape answers.
  const at::Tensor c = at::randn({60, 50});
  c10::IValue other[3] = {c, c, 1};
  ex.call(add, other, 3);
  dump = nlohmann::json::parse(ex.dump_extraction_context());
  EXPECT_EQ(dump["provenance"], "nearest");
}

TEST(Extractor, EachDeviceTypeHasItsOwnTable) {
  // A GPU's tuned rows (another fingerprint) serve the CUDA kernels and never the CPU's, and
  // replacing one device's table leaves the other's. No GPU is needed: choose_config only
  // reads the table and the descriptor.
  Extractor ex;
  const auto& cuda = kernels::gemm_f32_cuda_descriptor();
  const auto& cpu = kernels::gemm_f32_cpu_descriptor();
  const ShapeKey key = kernels::addmm_shape_key(64, 64, 64, false);
  const LaunchConfig heuristic = cuda.default_config(key);
  LaunchConfig tuned;
  for (const LaunchConfig& p : cuda.space.enumerate()) {
    if (cuda.complete(key, p).str() != heuristic.str() && cuda.can_run(key, cuda.complete(key, p))) {
      tuned = p;
      break;
    }
  }
  ASSERT_FALSE(tuned.params().empty()) << "no runnable non-default point in " << cuda.name;
  db::Recommendation row;
  row.fingerprint = "cuda|test-gpu";
  row.op = "aten::mm";
  row.shape_key = key.str();
  row.kernel = cuda.name;
  row.kernel_version = cuda.version;
  row.config = tuned;
  ex.set_table(std::make_shared<db::RecommendationTable>(
                   "cuda|test-gpu", std::vector<db::Recommendation>{row},
                   db::KernelVersions{{cuda.name, cuda.version}}),
               DeviceType::kCUDA);
  EXPECT_EQ(ex.table(DeviceType::kCUDA)->size(), 1U);
  EXPECT_EQ(ex.table(DeviceType::kCPU)->size(), 0U);
  auto gpu = ex.choose_config(cuda, "aten::mm", key);
  EXPECT_EQ(gpu.provenance, db::Provenance::kExact);
  EXPECT_EQ(gpu.config.str(), cuda.complete(key, tuned).str());
  EXPECT_EQ(ex.choose_config(cpu, "aten::mm", key).provenance, db::Provenance::kHeuristic);
  // A CPU table arrives: the GPU's choice is unchanged.
  ex.set_table(std::make_shared<db::RecommendationTable>(), DeviceType::kCPU);
  gpu = ex.choose_config(cuda, "aten::mm", key);
  EXPECT_EQ(gpu.provenance, db::Provenance::kExact);
  ex.set_table(std::make_shared<db::RecommendationTable>(), DeviceType::kCUDA);
  EXPECT_EQ(ex.choose_config(cuda, "aten::mm", key).provenance, db::Provenance::kHeuristic);
}

TEST(Extractor, PlansOfADestroyedExtractorAreNeverReused) {
  // Each extractor gets fresh heap memory for its registry; a thread-local eager plan of a
  // destroyed one (same address, same shapes) must not be taken for the new one's.
  const at::Tensor a = at::randn({8, 8});
  const at::Tensor b = at::randn({8, 8});
  for (int i = 0; i < 4; ++i) {
    auto ex = std::make_unique<Extractor>();
    c10::IValue args[3] = {a, b, 1};
    const OpHandle add = ex->resolve("aten::add.Tensor");
    for (int k = 0; k < 2; ++k) {
      EXPECT_TRUE(at::allclose(ex->call(add, args, 3).toTensor(), a + b));
    }
    EXPECT_EQ(nlohmann::json::parse(ex->dump_extraction_context())["eager_plan"], "hit");
  }
}

TEST(Extractor, FailedExtractionIsDumpedWithItsStage) {
  Extractor ex;
  c10::IValue args[2] = {at::ones({2, 3}), at::ones({5, 5})};
  EXPECT_THROW(ex.call(ex.resolve("aten::mm"), args, 2), ValueError);
  const auto dump = nlohmann::json::parse(ex.dump_extraction_context());
  EXPECT_EQ(dump["ok"], false);
  EXPECT_EQ(dump["stage"], "pack");
  EXPECT_NE(dump["error"].get<std::string>().find("cannot be multiplied"), std::string::npos);
}

TEST(Extractor, WrongArityIsAValidateError) {
  Extractor ex;
  c10::IValue args[1] = {at::ones({2})};
  try {
    ex.call(ex.resolve("aten::add.Tensor"), args, 1);
    ADD_FAILURE();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("validate: expected 3 arguments, got 1"),
              std::string::npos)
        << e.what();
  }
}

FusionNode ew(int chain_input, int uses, int inputs = 1) {
  FusionNode n;
  n.signature = "aten::add.Tensor";
  n.elementwise = true;
  n.chain_input = chain_input;
  n.uses = uses;
  n.external_inputs = inputs;
  return n;
}

TEST(FusionChecker, ChainsEpiloguesAndPrologues) {
  FusionChecker checker;
  FusionNode gemm;
  gemm.signature = "aten::linear";
  gemm.gemm = true;
  gemm.uses = 1;
  FusionNode act = ew(0, 1);
  act.signature = "aten::gelu";
  act.activation = true;
  FusionNode softmax;
  softmax.signature = "aten::_softmax";
  softmax.row_reduction = true;
  softmax.chain_input = 3;
  softmax.row_bytes = 4096;
  // linear → gelu | add → mul → softmax
  std::vector<FusionNode> nodes = {gemm, act, ew(-1, 1, 2), ew(2, 1, 1), softmax};
  auto groups = checker.plan(nodes, DeviceType::kCPU);
  ASSERT_EQ(groups.size(), 2U);
  EXPECT_EQ(groups[0].kind, FusionKind::kGemmEpilogue);
  EXPECT_EQ(groups[1].kind, FusionKind::kPointwiseReduction);
  EXPECT_EQ(groups[1].count, 3);
  // A value read twice breaks the chain.
  nodes = {ew(-1, 2), ew(0, 1), ew(1, 1)};
  groups = checker.plan(nodes, DeviceType::kCPU);
  ASSERT_EQ(groups.size(), 2U);
  EXPECT_EQ(groups[0].kind, FusionKind::kNone);
  EXPECT_EQ(groups[1].kind, FusionKind::kElementwiseChain);
  // The budget: rows too large for the working set stay unfused.
  FusionChecker tight;
  tight.set_budget(DeviceType::kCPU, {16, 8, 1024});
  nodes = {ew(-1, 1), softmax};
  nodes[1].chain_input = 0;
  groups = tight.plan(nodes, DeviceType::kCPU);
  ASSERT_EQ(groups.size(), 2U);
  EXPECT_NE(groups[0].reason.find("exceeds the budget"), std::string::npos) << groups[0].reason;
  // Chains are capped by the per-device op budget.
  tight.set_budget(DeviceType::kCPU, {2, 8, 1024});
  nodes = {ew(-1, 1), ew(0, 1), ew(1, 1), ew(2, 1)};
  groups = tight.plan(nodes, DeviceType::kCPU);
  ASSERT_EQ(groups.size(), 2U);
  EXPECT_EQ(groups[0].count, 2);
}

TEST(FusionChecker, AttentionIsOneGroupOnTheCpu) {
  const auto node = [](const char* sig, int chain_input, int uses) {
    FusionNode n;
    n.signature = sig;
    n.chain_input = chain_input;
    n.uses = uses;
    return n;
  };
  FusionNode qk = node("aten::matmul", -1, 1);
  qk.batched_gemm = true;
  FusionNode scale = node("aten::mul.Scalar", 0, 1);
  scale.scalar_scale = scale.elementwise = true;
  FusionNode mask = node("aten::add.Tensor", 1, 1);
  mask.tensor_add = mask.elementwise = true;
  FusionNode softmax = node("aten::softmax.int", 2, 1);
  softmax.softmax = softmax.row_reduction = true;
  FusionNode pv = node("aten::matmul", 3, 1);
  pv.batched_gemm = true;
  FusionChecker checker;
  auto groups = checker.plan({qk, scale, mask, softmax, pv}, DeviceType::kCPU);
  ASSERT_EQ(groups.size(), 1U);
  EXPECT_EQ(groups[0].kind, FusionKind::kAttention);
  EXPECT_EQ(groups[0].count, 5);
  EXPECT_STREQ(to_string(groups[0].kind), "attention");
  // Scale and mask are optional.
  FusionNode s2 = softmax;
  s2.chain_input = 0;
  FusionNode pv2 = pv;
  pv2.chain_input = 1;
  groups = checker.plan({qk, s2, pv2}, DeviceType::kCPU);
  ASSERT_EQ(groups.size(), 1U);
  EXPECT_EQ(groups[0].count, 3);
  // No CUDA kernel: CUDA keeps the prologue fusion and runs the products alone.
  groups = checker.plan({qk, scale, mask, softmax, pv}, DeviceType::kCUDA);
  ASSERT_EQ(groups.size(), 3U);
  EXPECT_EQ(groups[1].kind, FusionKind::kPointwiseReduction);
  // Probabilities read elsewhere too (returned, say) must materialise: no attention group.
  FusionNode read_twice = softmax;
  read_twice.uses = 2;
  groups = checker.plan({qk, scale, mask, read_twice, pv}, DeviceType::kCPU);
  for (const FusionGroup& g : groups) EXPECT_NE(g.kind, FusionKind::kAttention);
}

// The row budget of a prologue fused into softmax, applied by the FusionChecker through
// run_graph: the add's rows are its link (mm's output, whose sizes only shape propagation
// knows before anything runs) and its bias, N floats each.
TEST(FusionChecker, RowBudgetIsAppliedThroughRunGraph) {
  constexpr std::int64_t kRows = 8;
  constexpr std::int64_t kN = 256;
  const at::Tensor x = at::randn({kRows, 16});
  const at::Tensor w = at::randn({16, kN});
  const at::Tensor b = at::randn({kN});
  const at::Tensor expected = at::_softmax(at::mm(x, w) + b, -1, false);
  const auto graph = [&] {
    OpGraph g;
    g.values = {x, w, b, c10::IValue(1), c10::IValue(-1), c10::IValue(false),
                c10::IValue(), c10::IValue(), c10::IValue()};
    constexpr auto kData = OpGraph::Reads::kData;
    g.nodes = {{"aten::mm", {0, 1}, {6}, {}, kData},
               {"aten::add.Tensor", {6, 2, 3}, {7}, {}, kData},
               {"aten::_softmax", {7, 4, 5}, {8}, {}, kData}};
    g.outputs = {8};
    return g;
  };
  constexpr std::int64_t kRowBytes = 2 * kN * 4;
  Extractor ex;
  ex.fusion_checker().set_budget(DeviceType::kCPU, {16, 8, kRowBytes});
  OpGraph within = graph();
  auto plans = ex.run_graph(within);
  ASSERT_EQ(plans.size(), 2U);
  EXPECT_EQ(plans[1].pattern, "fused::pointwise_softmax[aten::add.Tensor+aten::_softmax]");
  EXPECT_NE(plans[1].fusion.find("row working set 2048 B"), std::string::npos) << plans[1].fusion;
  EXPECT_TRUE(at::allclose(within.values[8].toTensor(), expected, 1e-5, 1e-6));

  ex.fusion_checker().set_budget(DeviceType::kCPU, {16, 8, kRowBytes - 4});
  OpGraph over = graph();
  plans = ex.run_graph(over);
  ASSERT_EQ(plans.size(), 3U);
  EXPECT_EQ(plans[1].pattern, "aten::add.Tensor");
  EXPECT_NE(plans[1].fusion.find("row working set 2048 B exceeds the budget"), std::string::npos)
      << plans[1].fusion;
  EXPECT_TRUE(at::allclose(over.values[8].toTensor(), expected, 1e-5, 1e-6));
}

}  // namespace
}  // namespace ka::extractor
