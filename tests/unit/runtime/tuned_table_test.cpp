// Production loading: a tuned table from KA_TUNED_TABLE (an exported SQLite file) and the same
// table compiled in from header rows give the extractor identical picks, with provenance
// "exact" for the tuned shape.
#include <ka/core/fingerprint.hpp>
#include <ka/db/recommendation_io.hpp>
#include <ka/extractor/extractor.hpp>
#include <ka/kernels/elementwise.hpp>
#include <ka/runtime/runtime.hpp>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <unistd.h>

namespace ka::runtime {
namespace {

constexpr const char* kShape = "aten::add.Tensor(f32[96,40]c,f32[96,40]c)";

db::Recommendation tuned_row() {
  const auto& d = kernels::elementwise_f32_cpu_descriptor();
  db::Recommendation row;
  row.fingerprint = cpu_fingerprint().key();
  row.op = "aten::add.Tensor";
  row.shape_key = kShape;
  row.kernel = d.name;
  row.kernel_version = d.version;
  row.config.set("block_elems", 2048).set("threads", 1);
  row.median_ns = 1000.0;
  return row;
}

nlohmann::json add_and_dump(const Runtime& rt) {
  const at::Tensor a = at::randn({96, 40});
  const at::Tensor b = at::randn({96, 40});
  const auto out = rt.call("aten::add.Tensor", {a, b, 1});
  EXPECT_TRUE(at::allclose(out[0].toTensor(), a + b));
  // The dispatcher's kernel ran on this thread: its extraction is this thread's last one.
  return nlohmann::json::parse(rt.extractor().dump_extraction_context());
}

TEST(TunedTable, EnvironmentAndCompiledTablesGiveTheSamePick) {
  const std::string fp = cpu_fingerprint().key();
  const auto versions = extractor::Extractor::global().kernel_versions();
  const std::string path = ::testing::TempDir() + "ka_tuned_" + std::to_string(::getpid()) + ".db";
  db::export_sqlite(db::RecommendationTable(fp, {tuned_row()}, versions), path);

  Runtime rt;
  ::setenv("KA_TUNED_TABLE", path.c_str(), 1);
  EXPECT_TRUE(rt.load_table_from_environment());
  ::unsetenv("KA_TUNED_TABLE");
  EXPECT_FALSE(rt.load_table_from_environment());
  const auto from_file = add_and_dump(rt);
  EXPECT_EQ(from_file["provenance"], "exact");
  EXPECT_EQ(from_file["shape_key"], kShape);

  const std::string config = tuned_row().config.str();
  const db::CompiledRecommendation compiled[] = {
      {fp.c_str(), "aten::add.Tensor", kShape, kernels::elementwise_f32_cpu_descriptor().name.c_str(),
       kernels::elementwise_f32_cpu_descriptor().version, config.c_str(), nullptr, 1000.0,
       std::numeric_limits<double>::quiet_NaN(), -1, "2026-11-30T00:00:00Z"}};
  rt.set_table(db::RecommendationTable::from_compiled(compiled, 1, fp, versions, "{}"));
  const auto from_header = add_and_dump(rt);
  EXPECT_EQ(from_header["provenance"], "exact");
  EXPECT_EQ(from_header["config"], from_file["config"]);
  EXPECT_NE(from_file["config"].get<std::string>().find("block_elems=2048"), std::string::npos);

  // Back to no table: the heuristic answers.
  rt.set_table(db::RecommendationTable());
  EXPECT_EQ(add_and_dump(rt)["provenance"], "heuristic");
  std::remove(path.c_str());
}

TEST(TunedTable, AMeasuredUnfusedDecisionOverridesTheFusionRules) {
  const std::string ir = R"IR(
graph(%x : Tensor, %mask : Tensor):
  %scale : float = prim::Constant[value=0.5]()
  %dim : int = prim::Constant[value=-1]()
  %one : int = prim::Constant[value=1]()
  %false : bool = prim::Constant[value=0]()
  %t : Tensor = aten::mul(%x, %scale)
  %u : Tensor = aten::add(%t, %mask, %one)
  %p : Tensor = aten::_softmax(%u, %dim, %false)
  return (%p)
)IR";
  Runtime rt;
  const std::vector<c10::IValue> in = {at::randn({6, 40}), at::zeros({6, 40})};
  const GraphResult fused = rt.run_graph(ir, in);
  ASSERT_EQ(fused.tasks.size(), 1U);
  const extractor::TaskPlan& t = fused.tasks[0];
  ASSERT_EQ(t.pattern.rfind("fused::pointwise_softmax", 0), 0U) << t.pattern;

  db::Recommendation row;
  row.fingerprint = cpu_fingerprint().key();
  row.op = "fused::pointwise_softmax";
  row.shape_key = t.shape_key;
  row.kernel = t.kernel;
  row.kernel_version = t.kernel_version;
  row.config = LaunchConfig::parse(t.config);
  row.fusion = "unfused";
  rt.set_table(db::RecommendationTable(row.fingerprint, {row},
                                       extractor::Extractor::global().kernel_versions()));
  const GraphResult split = rt.run_graph(ir, in);
  EXPECT_EQ(split.tasks.size(), 3U) << "the measured decision was ignored";
  EXPECT_TRUE(at::allclose(split.outputs[0].toTensor(), fused.outputs[0].toTensor(), 1e-5, 1e-6));
  rt.set_table(db::RecommendationTable());
}

TEST(TunedTable, AnUnreadableTableNamesTheFile) {
  Runtime rt;
  try {
    rt.load_table("/nonexistent/ka-tuned.db");
    ADD_FAILURE();
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/ka-tuned.db"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ka::runtime
