// ka-tune on a GPU: a sweep of ka's CUDA SGEMM timed by CUDA events, stored under the GPU's
// fingerprint, loaded back as the CUDA kernels' table (and not the CPU's), and the tuned shape
// then runs through the pipeline with provenance "exact". Also: CUDA event timing against the
// host clock on one long kernel. Skips with the reason without a GPU or a CUDA libtorch.
#include <ka/db/sqlite.hpp>
#include <ka/executor/cuda_executor.hpp>
#include <ka/extractor/extractor.hpp>
#include <ka/kernels/gemm.hpp>
#include <ka/profiler/measure.hpp>
#include <ka/runtime/runtime.hpp>
#include <ka/tuner/tune.hpp>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include "require_cuda.hpp"
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <unistd.h>

namespace ka::tuner {
namespace {

TEST(TunerCuda, TunedTableRoundTripOnTheGpu) {
  KA_REQUIRE_CUDA_TENSORS();
  const std::string db = ::testing::TempDir() + "ka_tune_cuda_" + std::to_string(::getpid()) + ".db";
  std::remove(db.c_str());
  TuneOptions o;
  o.op = "aten::mm";
  o.shapes = {"256x320x192"};
  o.strategy = "random";
  o.budget = 5;
  o.db_path = db;
  o.measure.budget_s = 0.05;
  o.finalists = 2;
  o.progress = nullptr;
  o.device = DeviceType::kCUDA;
  const auto outcomes = tune(o);
  ASSERT_EQ(outcomes.size(), 1U);
  EXPECT_EQ(outcomes[0].kernel, kernels::gemm_f32_cuda_descriptor().name);
  EXPECT_EQ(outcomes[0].evaluated, 5U);
  EXPECT_GT(outcomes[0].best_median_ns, 0.0);
  {
    db::Connection c(db, db::Connection::Mode::kReadOnly);
    auto st = c.prepare("SELECT fingerprint FROM recommendations");
    ASSERT_TRUE(st.step());
    EXPECT_EQ(st.column_text(0).rfind("cuda|", 0), 0U) << st.column_text(0);
  }

  runtime::Runtime rt;
  rt.load_table(db);
  EXPECT_EQ(rt.extractor().table(DeviceType::kCUDA)->size(), 1U);
  EXPECT_EQ(rt.extractor().table(DeviceType::kCPU)->size(), 0U);
  const at::Tensor a = at::rand({256, 320});
  const at::Tensor b = at::rand({320, 192});
  const auto out = rt.call("aten::mm", {a.cuda(), b.cuda()});
  EXPECT_TRUE(at::allclose(out[0].toTensor().cpu(), at::mm(a, b), 1e-4, 1e-4));
  const auto dump = nlohmann::json::parse(rt.extractor().dump_extraction_context());
  EXPECT_EQ(dump["provenance"], "exact");
  EXPECT_EQ(dump["kernel"], kernels::gemm_f32_cuda_descriptor().name);
  rt.set_table(db::RecommendationTable());
  rt.extractor().set_table(std::make_shared<const db::RecommendationTable>(), DeviceType::kCUDA);
  std::remove(db.c_str());
}

TEST(MeasureCuda, EventTimeOfALongKernelAgreesWithTheHostClock) {
  KA_REQUIRE_CUDA_TENSORS();
  // 2048^3 SGEMM: ~1 ms on a recent GPU, so the host's launch and wait (~10-30 us) are small.
  auto& ex = extractor::Extractor::global();
  c10::IValue args[2] = {at::rand({2048, 2048}).cuda(), at::rand({2048, 2048}).cuda()};
  const auto call = ex.prepare_call(ex.resolve("aten::mm"), args, 2, nullptr);
  ASSERT_TRUE(call->status()) << call->status().reason();
  profiler::MeasureOptions opt;
  opt.budget_s = 0.5;
  const auto events = profiler::measure_cuda([&](void* s) { call->enqueue(s); }, opt);
  const auto host = profiler::measure([&] { call->run(); }, opt);
  const double ratio = events.median_ns() / host.median_ns();
  EXPECT_GT(ratio, 0.85) << events.str() << " vs " << host.str();
  EXPECT_LE(ratio, 1.02) << events.str() << " vs " << host.str();
  // Cold mode flushes the L2 through a device memset, outside the events.
  opt.mode = profiler::CacheMode::kCold;
  opt.budget_s = 0.2;
  const auto cold = profiler::measure_cuda([&](void* s) { call->enqueue(s); }, opt);
  EXPECT_GT(cold.flushes, 0);
  EXPECT_GT(cold.flush_bytes, 0);
}

}  // namespace
}  // namespace ka::tuner
