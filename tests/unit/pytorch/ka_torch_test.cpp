// libka_torch from a C++ libtorch program: the library linked, enable() puts ka's kernels in
// front of aten's CPU kernels in c10's dispatcher, at:: calls match the same calls with
// libtorch's kernels (the oracle), refused calls run on libtorch's kernel, and disable()
// leaves every dispatch table as it was.
#include <ka/core/fingerprint.hpp>
#include <ka/db/recommendation_table.hpp>
#include <ka/pytorch/ka_torch.hpp>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <vector>

namespace ka::pytorch {
namespace {

class KaTorch : public ::testing::Test {
 protected:
  void SetUp() override {
    disable();
    reset();
    at::manual_seed(0);
  }
  void TearDown() override { disable(); }
};

nlohmann::json report() { return nlohmann::json::parse(report_json()); }

// Calls of `op` that ran on ka's kernels and on libtorch's, from the report.
std::pair<std::int64_t, std::int64_t> served(const std::string& op) {
  std::pair<std::int64_t, std::int64_t> n{0, 0};
  for (const auto& row : report()) {
    if (row["op"] == op) {
      n.first += row["ka_calls"].get<std::int64_t>();
      n.second += row["fallback_calls"].get<std::int64_t>();
    }
  }
  return n;
}

// The operator's registrations and its computed dispatch table (which kernel each key runs).
std::string dispatch_state(const char* op, const char* overload = "") {
  const c10::OperatorHandle h = c10::Dispatcher::singleton().findSchemaOrThrow(op, overload);
  return h.dumpState() + h.dumpComputedTable();
}

void expect_close(const at::Tensor& got, const at::Tensor& ref, std::int64_t k) {
  ASSERT_EQ(got.sizes(), ref.sizes());
  const double tol = 2e-5 * std::sqrt(static_cast<double>(std::max<std::int64_t>(k, 1)));
  EXPECT_TRUE(at::allclose(got, ref, tol, tol * std::max(1.0, ref.abs().max().item<double>())))
      << "max |diff| " << (got - ref).abs().max().item<double>();
}

TEST_F(KaTorch, LinearLayersRunOnKaAndMatchLibtorch) {
  for (const auto& [m, k, n] : std::vector<std::array<std::int64_t, 3>>{
           {1, 512, 384}, {16, 256, 1000}, {128, 96, 64}, {7, 13, 5}}) {
    const at::Tensor x = at::randn({m, k});
    const at::Tensor w = at::randn({n, k});
    const at::Tensor b = at::randn({n});
    const at::Tensor ref = at::linear(x, w, b);
    const at::Tensor ref_mm = at::linear(x, w);
    enable();
    const at::Tensor got = at::linear(x, w, b);
    const at::Tensor got_mm = at::linear(x, w);
    disable();
    expect_close(got, ref, k);
    expect_close(got_mm, ref_mm, k);
  }
  EXPECT_EQ(served("aten::addmm"), std::make_pair(std::int64_t{4}, std::int64_t{0}));
  EXPECT_EQ(served("aten::mm"), std::make_pair(std::int64_t{4}, std::int64_t{0}));
}

TEST_F(KaTorch, WhatKaRefusesRunsOnLibtorch) {
  const at::Tensor a = at::randn({6, 5}, at::kDouble);
  const at::Tensor ref = at::mm(a, a.t());
  enable();
  const at::Tensor got = at::mm(a, a.t());
  const at::Tensor relu_t = at::relu(at::randn({8, 4}).t());  // libtorch keeps the layout
  disable();
  EXPECT_TRUE(at::equal(got, ref));
  EXPECT_EQ(relu_t.strides(), (std::vector<std::int64_t>{1, 4}));
  EXPECT_EQ(served("aten::mm"), std::make_pair(std::int64_t{0}, std::int64_t{1}));
  const auto last = nlohmann::json::parse(explain_json()).back();
  EXPECT_EQ(last["served"], "fallback");
  EXPECT_FALSE(last["reason"].get<std::string>().empty());
}

// F.layer_norm (a composite in aten) runs on ka without autograd and in inference mode;
// with an input that requires grad it runs libtorch's composite, so gradients are stock.
TEST_F(KaTorch, LayerNormRunsOnKaAndKeepsAutograd) {
  const at::Tensor x = at::randn({4, 33, 768});
  const at::Tensor g = at::randn({768});
  const at::Tensor b = at::randn({768});
  const at::Tensor ref = at::layer_norm(x, {768}, g, b);
  enable();
  const at::Tensor got = at::layer_norm(x, {768}, g, b);
  at::Tensor in_inference;
  {
    c10::InferenceMode guard;
    in_inference = at::layer_norm(x, {768}, g, b);
  }
  disable();
  expect_close(got, ref, 768);
  expect_close(in_inference, ref, 768);
  EXPECT_EQ(served("aten::layer_norm"), std::make_pair(std::int64_t{2}, std::int64_t{0}));

  auto grads = [&] {
    const at::Tensor xl = x.clone().requires_grad_();
    const at::Tensor gl = g.clone().requires_grad_();
    at::layer_norm(xl, {768}, gl, b).pow(2).sum().backward();
    return std::make_pair(xl.grad(), gl.grad());
  };
  const auto stock = grads();
  enable();
  const auto with_ka = grads();
  disable();
  expect_close(with_ka.first, stock.first, 768);
  expect_close(with_ka.second, stock.second, 768);
  EXPECT_EQ(served("aten::layer_norm").second, 1);
}

TEST_F(KaTorch, DisableRestoresEveryDispatchTable) {
  const std::vector<std::pair<const char*, const char*>> ops = {
      {"aten::mm", ""}, {"aten::addmm", "out"}, {"aten::_softmax", ""}, {"aten::add", "Tensor"},
      {"aten::relu_", ""}, {"aten::sum", "dim_IntList"}, {"aten::layer_norm", ""}};
  std::vector<std::string> before;
  for (const auto& [op, overload] : ops) before.push_back(dispatch_state(op, overload));
  enable();
  EXPECT_TRUE(enabled());
  EXPECT_NE(dispatch_state("aten::mm"), before[0]);
  disable();
  EXPECT_FALSE(enabled());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(dispatch_state(ops[i].first, ops[i].second), before[i]) << ops[i].first;
  }
}

TEST_F(KaTorch, ExplainAndReportNameWhatRan) {
  enable();
  at::softmax(at::randn({4, 64}), -1);
  at::gelu(at::randn({4, 64}));
  disable();
  const auto calls = nlohmann::json::parse(explain_json());
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["op"], "aten::_softmax");
  EXPECT_EQ(calls[1]["op"], "aten::gelu");
  for (const auto& c : calls) {
    EXPECT_EQ(c["served"], "ka");
    EXPECT_FALSE(c["kernel"].get<std::string>().empty());
    EXPECT_GT(c["kernel_version"].get<int>(), 0);
    EXPECT_EQ(c["shapes"][0], (std::vector<std::int64_t>{4, 64}));
  }
  reset();
  EXPECT_TRUE(report().empty());
  EXPECT_TRUE(nlohmann::json::parse(explain_json()).empty());
}

TEST_F(KaTorch, TorchOpsKaServesWithoutTheOverride) {
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("ka::mm", "").typed<
      at::Tensor(const at::Tensor&, const at::Tensor&)>();
  const at::Tensor a = at::randn({9, 33});
  const at::Tensor b = at::randn({33, 17});
  expect_close(op.call(a, b), at::mm(a, b), 33);
  EXPECT_EQ(served("aten::mm"), std::make_pair(std::int64_t{1}, std::int64_t{0}));
}

// A compiled-in table (the rows of a generated header) reaches F.linear's calls: a row for
// this CPU answers with provenance "exact"; rows of another CPU are skipped; an empty table
// puts the heuristic back.
TEST_F(KaTorch, CompiledTableAnswersLinearCalls) {
  const at::Tensor x = at::randn({8, 96});
  const at::Tensor w = at::randn({40, 96});
  const at::Tensor b = at::randn({40});
  auto last_call = [&] {
    reset();
    enable();
    expect_close(at::linear(x, w, b), at::addmm(b, x, w.t()), 96);
    disable();
    return nlohmann::json::parse(explain_json()).at(0);
  };
  const auto heuristic = last_call();
  ASSERT_EQ(heuristic["served"], "ka");
  EXPECT_EQ(heuristic["provenance"], "heuristic");

  const std::string cpu = cpu_fingerprint().key();
  const std::string op = heuristic["op"], key = heuristic["shape_key"];
  const std::string kernel = heuristic["kernel"], config = heuristic["config"];
  const db::CompiledRecommendation rows[] = {
      {cpu.c_str(), op.c_str(), key.c_str(), kernel.c_str(), heuristic["kernel_version"].get<int>(),
       config.c_str(), nullptr, 1000.0, 1.0, -1, "2026-12-03T00:00:00Z"}};
  EXPECT_EQ(use_compiled_table(rows, 1, "{}"), 1);
  EXPECT_EQ(last_call()["provenance"], "exact");

  const db::CompiledRecommendation other_cpu[] = {
      {"cpu:another", op.c_str(), key.c_str(), kernel.c_str(),
       heuristic["kernel_version"].get<int>(), config.c_str(), nullptr, 1000.0, 1.0, -1, ""}};
  EXPECT_EQ(use_compiled_table(other_cpu, 1, "{}"), 0);
  EXPECT_EQ(last_call()["provenance"], "heuristic");
  EXPECT_EQ(use_compiled_table(nullptr, 0, "{}"), 0);
}

TEST_F(KaTorch, LoadTableErrorNamesTheFile) {
  try {
    load_table("/nonexistent/tuned.db");
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tuned.db"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ka::pytorch
