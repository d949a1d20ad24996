// ka-tune's engine on a tiny GEMM: trials land in the database, a second run resumes without
// repeating a configuration, and the winner reaches the extractor through the table; the same
// for the memory-bound kernels.
#include <ka/core/error.hpp>
#include <ka/db/sqlite.hpp>
#include <ka/kernels/gemm.hpp>
#include <ka/runtime/runtime.hpp>
#include <ka/tuner/tune.hpp>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace ka::tuner {
namespace {

// Removes a test database and the -wal and -shm files beside it, which SQLite leaves when the
// last connection to close was read-only (as this file's checks and load_table are).
void remove_db(const std::string& db) {
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((db + suffix).c_str());
}

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
  remove_db(db);
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
  remove_db(db);
}

// "MxKxN:t" tunes the call F.linear makes (B = Wᵀ of a contiguous N×K weight): its rows carry
// layout `t`, so they answer F.linear's calls and not a contiguous B's; bmm's ":t" is
// attention's k.transpose(1, 2).
TEST(Tune, TransposedBShapesTuneTheLinearLayout) {
  const std::string db = ::testing::TempDir() + "ka_tune_t_" + std::to_string(::getpid()) + ".db";
  remove_db(db);
  TuneOptions o = tiny(db);
  o.shapes = {"8x40x72:t"};
  // Configurations this ISA path refuses (micro_n 32 and 48 off AVX-512, skinny=1 above 16
  // rows) are not drawn: every one of a small budget runs.
  o.budget = 4;
  ASSERT_EQ(tune(o).size(), 1U);
  o.op = "aten::bmm";
  o.shapes = {"3x8x40x24:t"};
  ASSERT_EQ(tune(o).size(), 1U);
  {
    db::Connection c(db, db::Connection::Mode::kReadOnly);
    // Refused configurations are not swept; none may fail or compute garbage.
    EXPECT_EQ(count(c, "SELECT COUNT(*) FROM trials WHERE disposition != 'ok'"), 0);
    auto st = c.prepare("SELECT shape_key FROM recommendations ORDER BY op");
    std::vector<std::string> keys;
    while (st.step()) keys.push_back(st.column_text(0));
    ASSERT_EQ(keys.size(), 2U);
    EXPECT_NE(keys[0].find("f32[40,72]t"), std::string::npos) << keys[0];  // addmm
    // A batch of transposed matrices is strided in a shape key (only a matrix is `t`), as
    // attention's bmm(q, k.transpose(1, 2)) is.
    EXPECT_NE(keys[1].find("f32[3,40,24]s"), std::string::npos) << keys[1];
  }
  runtime::Runtime rt;
  rt.load_table(db);
  const at::Tensor bias = at::rand({72});
  const at::Tensor x = at::rand({8, 40});
  const at::Tensor w = at::rand({72, 40});
  const auto linear = rt.call("aten::addmm", {bias, x, w.t(), 1, 1});
  EXPECT_TRUE(at::allclose(linear[0].toTensor(), at::linear(x, w, bias), 1e-4, 1e-5));
  EXPECT_EQ(nlohmann::json::parse(rt.extractor().dump_extraction_context())["provenance"], "exact");
  // A contiguous B of the same sizes is another layout: no row of its own.
  rt.call("aten::addmm", {bias, x, w.t().contiguous(), 1, 1});
  EXPECT_NE(nlohmann::json::parse(rt.extractor().dump_extraction_context())["provenance"], "exact");
  rt.set_table(db::RecommendationTable());

  o.op = "aten::_softmax";
  o.shapes = {"8x40:t"};  // only a GEMM's B can be transposed
  EXPECT_THROW(tune(o), ValueError);
  remove_db(db);
}

// The memory-bound kernels tune through the same engine: softmax's stream/prefetch/rows
// space, checked against libtorch; the winner reaches the extractor through the table.
TEST(Tune, SoftmaxLayerNormSumAndElementwiseOps) {
  const std::string db = ::testing::TempDir() + "ka_tune_rows_" + std::to_string(::getpid()) + ".db";
  remove_db(db);
  for (const char* op : {"aten::_softmax", "aten::layer_norm", "aten::sum.dim_IntList",
                         "aten::add.Tensor", "aten::gelu", "aten::silu", "aten::tanh"}) {
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
    EXPECT_EQ(count(c, "SELECT COUNT(*) FROM recommendations"), 7);
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
  remove_db(db);
}

// An exhaustive sweep of a tiny GEMM: most of the space runs as a few configurations, each
// measured once (the rest equivalent: free, not stored); the winner is the default or runs
// differently from it (never the default timed against itself).
TEST(Tune, EquivalentConfigsAreMeasuredOnce) {
  const std::string db = ::testing::TempDir() + "ka_tune_eq_" + std::to_string(::getpid()) + ".db";
  remove_db(db);
  TuneOptions o = tiny(db);
  o.op = "aten::mm";
  o.shapes = {"8x16x24"};
  o.strategy = "exhaustive";
  o.budget = 0;
  o.measure.budget_s = 0.002;
  o.threads = 1;
  const auto out = tune(o);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].evaluated + out[0].equivalent, out[0].space);
  const auto& d = kernels::gemm_f32_cpu_descriptor();
  const ShapeKey key = ShapeKey::parse(out[0].shape_key);
  // The sweep is the one-thread points this host's ISA path can run; the others (micro-tile
  // widths it lacks) are refused, counted and not swept. Most runnable ones are equivalent.
  std::size_t runnable = 0;
  std::size_t one_thread = 0;
  for (const LaunchConfig& p : d.space.enumerate()) {
    if (p.get_or("threads", 0) != 1) continue;
    ++one_thread;
    if (d.can_run(key, d.complete(key, p)).is_ok()) ++runnable;
  }
  ASSERT_GT(runnable, 0U);
  EXPECT_EQ(out[0].space, runnable);
  EXPECT_EQ(out[0].refused, one_thread - runnable);
  EXPECT_EQ(out[0].failed, 0U);
  EXPECT_GT(out[0].equivalent, runnable / 2) << "tiles beyond 8 x 24 all run alike";
  const std::string def = params_str(params_of(d.default_config(key)));
  {
    db::Connection c(db, db::Connection::Mode::kReadOnly);
    EXPECT_EQ(count(c, "SELECT COUNT(*) FROM trials"), static_cast<std::int64_t>(out[0].evaluated));
    // Every stored ok trial has its own canonical form.
    auto st = c.prepare("SELECT config FROM trials WHERE disposition = 'ok'");
    std::set<std::string> forms;
    std::size_t ok = 0;
    while (st.step()) {
      const LaunchConfig point = LaunchConfig::parse(st.column_text(0));
      forms.insert(d.canonical(key, point).str());
      ++ok;
    }
    EXPECT_EQ(forms.size(), ok);
  }
  if (out[0].best_config != def) {
    LaunchConfig best;  // "name=value name=value ..."
    std::istringstream words(out[0].best_config);
    for (std::string word; words >> word;) {
      const auto eq = word.find('=');
      best.set(word.substr(0, eq), std::stoll(word.substr(eq + 1)));
    }
    EXPECT_NE(d.canonical(key, best).str(), d.canonical(key, params_of(d.default_config(key))).str())
        << out[0].best_config << " runs as the default " << def;
  } else {
    EXPECT_DOUBLE_EQ(out[0].gain, 1.0);
  }
  remove_db(db);
}

TEST(Tune, BadRequestsAreClearErrors) {
  TuneOptions o = tiny("/tmp/unused.db");
  o.shapes = {"24x40"};
  EXPECT_THROW(tune(o), ValueError);
  o.shapes = {"24x40x72"};
  o.op = "aten::pow.Tensor_Scalar";  // ka runs it, but ka-tune builds no calls for it
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

// The message tune(o) throws as ka::ValueError ("" when it throws none).
std::string value_error_of(const TuneOptions& o) {
  try {
    tune(o);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

TEST(Tune, ErrorsNameTheOptionNotTheTool) {
  // ka-tune's main() prefixes "ka-tune: error: "; the library's messages start with what they
  // are about.
  TuneOptions o = tiny("/tmp/unused.db");
  o.shapes = {};
  EXPECT_EQ(value_error_of(o).rfind("no shapes to tune for aten::addmm", 0), 0U)
      << value_error_of(o);
  o = tiny("/tmp/unused.db");
  o.threads = -1;
  EXPECT_EQ(value_error_of(o).rfind("--threads -1: expected 0 (all cores) to ", 0), 0U)
      << value_error_of(o);
  // Budgets and counts that make no sense are refused by the library too, not only by
  // ka-tune's command line.
  o = tiny("/tmp/unused.db");
  o.threads = 100000;
  EXPECT_EQ(value_error_of(o).rfind("--threads 100000: expected 0 (all cores) to ", 0), 0U)
      << value_error_of(o);
  o = tiny("/tmp/unused.db");
  o.time_budget_s = std::nan("");
  EXPECT_EQ(value_error_of(o), "--time-budget nan: expected seconds > 0");
  o = tiny("/tmp/unused.db");
  o.finalists = -3;
  EXPECT_EQ(value_error_of(o), "--finalists -3: expected 1 or more");
  o = tiny(":memory:");
  EXPECT_EQ(value_error_of(o).rfind("--db ':memory:': the results go to this database", 0), 0U)
      << value_error_of(o);
  std::remove("/tmp/unused.db");
}

}  // namespace
}  // namespace ka::tuner
