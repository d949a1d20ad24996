// ka-tune's engine on a tiny GEMM: trials land in the database, a second run resumes without
// repeating a configuration, and the winner reaches the extractor through the table; the same
// for the memory-bound kernels.
#include <ka/core/error.hpp>
#include <ka/db/sqlite.hpp>
#include <ka/runtime/runtime.hpp>
#include <ka/tuner/tune.hpp>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <unistd.h>

namespace ka::tuner {
namespace {

TuneOptions tiny(const std::string& db) {
  TuneOptions o;
  o.op = "aten::addmm";
  o.shapes = {"24x40x72"};
  o.strategy = "random";
  o.budget = 6;
  o.db_path = db;
  o.measure.budget_s = 0.02;
  o.measure.min_repetitions = 3;
  o.finalists = 2;
  o.progress = nullptr;
  return o;
}

std::int64_t count(db::Connection& c, const std::string& sql) {
  auto st = c.prepare(sql);
  EXPECT_TRUE(st.step());
  return st.column_int64(0);
}

TEST(Tune, StoresTrialsResumesAndFeedsTheExtractor) {
  const std::string db = ::testing::TempDir() + "ka_tune_" + std::to_string(::getpid()) + ".db";
  std::remove(db.c_str());
  auto first = tune(tiny(db));
  ASSERT_EQ(first.size(), 1U);
  EXPECT_EQ(first[0].evaluated, 6U);
  EXPECT_EQ(first[0].reused, 0U);
  EXPECT_GT(first[0].best_median_ns, 0.0);
  EXPECT_GE(first[0].gain, 0.5);

  auto second = tune(tiny(db));
  EXPECT_EQ(second[0].reused, 6U);
  EXPECT_EQ(second[0].evaluated, 6U);
  {
    db::Connection c(db, db::Connection::Mode::kReadOnly);
    EXPECT_EQ(count(c, "SELECT COUNT(*) FROM trials"), 12);
    EXPECT_EQ(count(c, "SELECT COUNT(DISTINCT config) FROM trials"), 12)
        << "a resumed sweep measured a configuration twice";
    EXPECT_EQ(count(c, "SELECT COUNT(*) FROM recommendations WHERE op = 'aten::addmm'"), 1);
    EXPECT_EQ(count(c, "SELECT COUNT(*) FROM runs WHERE tool = 'ka-tune' AND status = 'complete'"), 2);
  }

  // The tuned shape now comes out of the table with provenance "exact".
  runtime::Runtime rt;
  rt.load_table(db);
  const at::Tensor bias = at::rand({72});
  const at::Tensor a = at::rand({24, 40});
  const at::Tensor b = at::rand({40, 72});
  const auto out = rt.call("aten::addmm", {bias, a, b, 1, 1});
  EXPECT_TRUE(at::allclose(out[0].toTensor(), at::addmm(bias, a, b), 1e-4, 1e-5));
  const auto dump = nlohmann::json::parse(rt.extractor().dump_extraction_context());
  EXPECT_EQ(dump["provenance"], "exact");
  EXPECT_NE(dump["config"].get<std::string>().find(second[0].best_config.substr(0, 8)),
            std::string::npos)
      << dump["config"] << " vs " << second[0].best_config;
  rt.set_table(db::RecommendationTable());
  std::remove(db.c_str());
}

// The memory-bound kernels tune through the same engine: softmax's stream/prefetch/rows
// space, checked against libtorch; the winner reaches the extractor through the table.
TEST(Tune, SoftmaxLayerNormSumAndElementwiseOps) {
  const std::string db = ::testing::TempDir() + "ka_tune_rows_" + std::to_string(::getpid()) + ".db";
  std::remove(db.c_str());
  for (const char* op : {"aten::_softmax", "aten::layer_norm", "aten::sum.dim_IntList",
                         "aten::add.Tensor", "aten::gelu", "aten::silu"}) {
    TuneOptions o = tiny(db);
    o.op = op;
    o.shapes = {"33x1000"};
    o.budget = 4;
    const auto out = tune(o);
    ASSERT_EQ(out.size(), 1U) << op;
    EXPECT_EQ(out[0].evaluated, 4U) << op;
    EXPECT_EQ(out[0].failed, 0U) << op << ": a configuration failed or computed garbage";
    EXPECT_GT(out[0].best_median_ns, 0.0) << op;
  }
  {
    db::Connection c(db, db::Connection::Mode::kReadOnly);
    EXPECT_EQ(count(c, "SELECT COUNT(*) FROM recommendations"), 6);
    EXPECT_EQ(count(c, "SELECT COUNT(*) FROM trials WHERE disposition != 'ok'"), 0);
  }
  runtime::Runtime rt;
  rt.load_table(db);
  const at::Tensor x = at::rand({33, 1000});
  const auto out = rt.call("aten::_softmax", {x, -1, false});
  EXPECT_TRUE(at::allclose(out[0].toTensor(), at::_softmax(x, -1, false), 1e-5, 1e-7));
  const auto dump = nlohmann::json::parse(rt.extractor().dump_extraction_context());
  EXPECT_EQ(dump["provenance"], "exact");
  rt.set_table(db::RecommendationTable());
  std::remove(db.c_str());
}

TEST(Tune, BadRequestsAreClearErrors) {
  TuneOptions o = tiny("/tmp/unused.db");
  o.shapes = {"24x40"};
  EXPECT_THROW(tune(o), ValueError);
  o.shapes = {"24x40x72"};
  o.op = "aten::tanh";  // not an op ka-tune builds calls for
  EXPECT_THROW(tune(o), ValueError);
  o.op = "aten::_softmax";
  o.shapes = {"2x3x4x5x6"};  // more dims than ka-tune builds
  EXPECT_THROW(tune(o), ValueError);
  o.shapes = {"0x3"};
  EXPECT_THROW(tune(o), ValueError);
  o.op = "aten::addmm";
  o.strategy = "psychic";
  EXPECT_THROW(tune(o), ValueError);
  std::remove("/tmp/unused.db");
}

}  // namespace
}  // namespace ka::tuner
