// The cases ka-bench times: graph cases run fused, unfused and by libtorch, checked and
// explained; GEMM cases through the same interface.
#include <ka/core/error.hpp>
#include <ka/extractor/extractor.hpp>
#include <ka/harness/suite.hpp>

#include <ka/harness/detail/bench_case.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace ka::harness::detail {
namespace {
namespace fs = std::filesystem;

Suite tiny_suite() {
  return load_suite_file(std::string(KA_TEST_SUITE_FIXTURES) + "/fused_tiny.yaml");
}

const SuiteCase& find_case(const Suite& s, const std::string& name) {
  const auto it = std::find_if(s.cases.begin(), s.cases.end(),
                               [&](const SuiteCase& c) { return c.name == name; });
  if (it == s.cases.end()) throw std::runtime_error("no case " + name);
  return *it;
}

int fused_tasks(const VariantInfo& info) {
  return static_cast<int>(
      std::count_if(info.tasks.begin(), info.tasks.end(),
                    [](const TaskInfo& t) { return t.pattern.rfind("fused::", 0) == 0; }));
}

TEST(BenchCase, VariantsOfOpAndGraphCases) {
  const Suite s = tiny_suite();
  EXPECT_EQ(variants_of(find_case(s, "mlp")),
            (std::vector<std::string>{"ka", "ka_unfused", "libtorch"}));
  EXPECT_EQ(variants_of(find_case(s, "primes")), (std::vector<std::string>{"ka", "libtorch"}));
  EXPECT_DOUBLE_EQ(flop_of(find_case(s, "primes")), 2.0 * 37 * 53 * 71);
  EXPECT_DOUBLE_EQ(flop_of(find_case(s, "mlp")), 0.0);
}

TEST(BenchCase, GraphCasesMatchLibtorchFusedAndUnfused) {
  const Suite s = tiny_suite();
  const CaseContext context{2, "libtorch gemm"};
  for (const SuiteCase& c : s.cases) {
    if (!c.is_graph()) continue;
    SCOPED_TRACE(c.name);
    const auto b = make_bench_case(c, 7, context);
    for (std::size_t v = 0; v < 2; ++v) {
      const CheckResult r = b->check(v);
      EXPECT_TRUE(r.correct) << r.detail;
      EXPECT_FALSE(r.refused);
      EXPECT_LT(r.max_abs_error, 1e-3);
      const VariantInfo info = b->info(v);
      EXPECT_EQ(info.op, "graph:" + c.graph);
      ASSERT_FALSE(info.tasks.empty());
      for (const TaskInfo& t : info.tasks) {
        EXPECT_FALSE(t.kernel.empty());
        EXPECT_FALSE(t.config.empty());
        EXPECT_EQ(t.provenance, db::Provenance::kHeuristic);
        for (const int a : t.after) EXPECT_LT(a, t.id) << "tasks wait only for earlier tasks";
      }
      // The fused run fuses something; the unfused run nothing.
      EXPECT_EQ(fused_tasks(info) > 0, v == 0);
    }
    for (std::size_t v = 0; v < 3; ++v) EXPECT_TRUE(b->run(v).is_ok());
    EXPECT_NE(b->info(2).kernel.find("interpreter"), std::string::npos);
  }
}

TEST(BenchCase, GraphMinBytesAreInputsReadOnceAndOutputsWrittenOnce) {
  const Suite s = tiny_suite();
  const auto b = make_bench_case(find_case(s, "residual_ln"), 7, CaseContext{2, ""});
  EXPECT_EQ(b->info(0).min_bytes, 0.0) << "unknown before the reference has run";
  ASSERT_TRUE(b->check(0).correct);
  // x, res [9, 80], w, b [80] read; y [9, 80] written; fp32.
  const double want = 4.0 * (9 * 80 * 2 + 80 * 2 + 9 * 80);
  EXPECT_DOUBLE_EQ(b->info(0).min_bytes, want);
  EXPECT_DOUBLE_EQ(b->info(2).min_bytes, want);
}

TEST(BenchCase, MlpPlanIsGemmWithGeluEpilogueThenGemm) {
  const Suite s = tiny_suite();
  const auto b = make_bench_case(find_case(s, "mlp"), 7, CaseContext{2, ""});
  ASSERT_TRUE(b->check(0).correct);
  ASSERT_TRUE(b->check(1).correct);
  const VariantInfo fused = b->info(0);
  ASSERT_EQ(fused.tasks.size(), 2U);
  EXPECT_EQ(fused.tasks[0].pattern, "fused::gemm_epilogue[aten::linear+aten::gelu]");
  EXPECT_EQ(fused.tasks[0].nodes, (std::vector<int>{0, 1}));
  EXPECT_FALSE(fused.tasks[0].fusion.empty());
  EXPECT_EQ(fused.tasks[1].after, std::vector<int>{1});
  EXPECT_NE(fused.config.find(" | "), std::string::npos) << "one config per task: " << fused.config;
  EXPECT_EQ(b->info(1).tasks.size(), 3U);
  EXPECT_EQ(fused.shape_key, "x=17x48,w1=96x48,b1=96,w2=48x96,b2=48");
}

TEST(BenchCase, AGraphNodeKaDoesNotServeRunsOnLibtorch) {
  const fs::path p = fs::temp_directory_path() / "ka_bench_case_test_abs.yaml";
  std::ofstream(p) << R"(suite: t
graphs:
  g: |
    graph(%x : Tensor):
      %y : Tensor = aten::abs(%x)
      return (%y)
groups:
  - model: m
    cases:
      - {name: abs, graph: g, inputs: {x: [4, 4]}}
)";
  const Suite s = load_suite_file(p.string());
  fs::remove(p);
  const auto b = make_bench_case(s.cases[0], 1, CaseContext{1, ""});
  const CheckResult r = b->check(0);
  EXPECT_TRUE(r.correct) << r.detail;
  const VariantInfo info = b->info(0);
  ASSERT_EQ(info.tasks.size(), 1U);
  EXPECT_EQ(info.tasks[0].pattern, "aten::abs");
  EXPECT_EQ(info.tasks[0].kernel, "libtorch");
  EXPECT_EQ(info.tasks[0].provenance, db::Provenance::kFallback);
  EXPECT_NE(info.tasks[0].fallback.find("ka has no kernel for aten::abs"), std::string::npos)
      << info.tasks[0].fallback;
  EXPECT_EQ(info.tasks[0].shape_key, "[4,4]");
  EXPECT_EQ(info.kernel, "libtorch");
}

TEST(BenchCase, GemmCaseThroughTheSameInterface) {
  const Suite s = tiny_suite();
  const auto b = make_bench_case(find_case(s, "primes"), 7, CaseContext{2, "at::addmm_out (x)"});
  const CheckResult r = b->check(0);
  EXPECT_TRUE(r.correct) << r.detail;
  const VariantInfo ka = b->info(0);
  EXPECT_EQ(ka.op, "aten::addmm");
  EXPECT_EQ(ka.provenance, "heuristic");
  EXPECT_NE(ka.config.find("threads="), std::string::npos) << ka.config;
  EXPECT_TRUE(ka.tasks.empty());
  EXPECT_EQ(b->info(1).kernel, "at::addmm_out (x)");
  EXPECT_TRUE(b->run(0).is_ok());
  EXPECT_TRUE(b->run(1).is_ok());
}

// "ka" is what a program calling ka gets: the call goes through ka's dispatcher and extractor
// (the out= overload, into the case's output); ka-kernel calls the same kernel at the same
// configuration directly.
TEST(BenchCase, KaGoesThroughThePipelineAndKaKernelDoesNot) {
  const Suite s = tiny_suite();
  CaseContext context{2, "at::addmm_out (x)"};
  context.references = {kImplLibtorch, kImplKaKernel};
  const auto b = make_bench_case(find_case(s, "primes"), 7, context);
  ASSERT_EQ(variants_of(find_case(s, "primes"), context.references),
            (std::vector<std::string>{"ka", "libtorch", "ka-kernel"}));
  auto& ex = extractor::Extractor::global();
  ASSERT_TRUE(b->run(0).is_ok());
  const auto after_ka = nlohmann::json::parse(ex.dump_extraction_context());
  EXPECT_EQ(after_ka["op"], "aten::addmm.out");
  EXPECT_EQ(after_ka["ok"], true);
  ASSERT_TRUE(b->run(2).is_ok());
  EXPECT_EQ(nlohmann::json::parse(ex.dump_extraction_context()), after_ka)
      << "ka-kernel went through the extractor";
  for (const std::size_t v : {std::size_t{0}, std::size_t{2}}) {
    const CheckResult r = b->check(v);
    EXPECT_TRUE(r.correct) << v << ": " << r.detail;
  }
  EXPECT_EQ(b->info(0).kernel, b->info(2).kernel);
  EXPECT_EQ(b->info(0).config, b->info(2).config);
  EXPECT_TRUE(b->run_kernel());
}

}  // namespace
}  // namespace ka::harness::detail
