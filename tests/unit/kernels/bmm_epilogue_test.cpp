// The CPU bmm against at::bmm (strided and transposed operands, the points of its space) and
// the GEMM epilogues against act(at::addmm(...)) on the packed and skinny paths; the prepared
// launches run block by block as ka's executor runs them.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <ka/core/error.hpp>
#include <ka/core/fingerprint.hpp>
#include <ka/kernels/gemm.hpp>
#include <string>
#include <vector>

#include "torch_view.hpp"

namespace ka::kernels {
namespace {

using test::view_of;

LaunchConfig config(std::int64_t tm, std::int64_t tn, std::int64_t tk, std::int64_t threads,
                    std::int64_t skinny = 0) {
  LaunchConfig c;
  c.set("tile_m", tm).set("tile_n", tn).set("tile_k", tk).set("threads", threads);
  c.set("skinny", skinny).set("split_k", 1).set("micro_n", 0).set("block_m", 0);
  return c;
}

void expect_close(const at::Tensor& got, const at::Tensor& want, std::int64_t k,
                  const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  if (got.numel() == 0) return;
  const double atol = 1e-5 * std::sqrt(static_cast<double>(std::max<std::int64_t>(k, 1)));
  EXPECT_TRUE(at::allclose(got, want, 1e-4, atol))
      << what << ": max abs error " << (got - want).abs().max().item<float>();
}

at::Tensor run_bmm(const at::Tensor& a, const at::Tensor& b, const LaunchConfig& cfg) {
  at::Tensor out = at::full({a.size(0), a.size(1), b.size(2)}, NAN);
  BmmArgs args;
  args.out = view_of(out);
  args.mat1 = view_of(a);
  args.mat2 = view_of(b);
  const Status st = bmm_f32_cpu(args, cfg);
  EXPECT_TRUE(st.is_ok()) << st.reason();
  return out;
}

TEST(BmmCpu, MatchesAtenWithStridedOperands) {
  at::manual_seed(1);
  const at::Tensor a = at::randn({3, 37, 53});
  const at::Tensor b = at::randn({3, 53, 29});
  const at::Tensor at_ = at::randn({3, 53, 37}).transpose(1, 2);
  const at::Tensor bt = at::randn({3, 29, 53}).transpose(1, 2);
  const at::Tensor ab = at::randn({37, 3, 53}).transpose(0, 1);  // batch not outermost
  for (const auto& cfg : {config(6, 32, 64, 1), config(12, 64, 16, 2), config(96, 256, 256, 2)}) {
    expect_close(run_bmm(a, b, cfg), at::bmm(a, b), 53, "plain " + cfg.str());
    expect_close(run_bmm(at_, bt, cfg), at::bmm(at_, bt), 53, "transposed " + cfg.str());
    expect_close(run_bmm(ab, b, cfg), at::bmm(ab, b), 53, "batch-strided " + cfg.str());
  }
  expect_close(run_bmm(at::randn({0, 4, 5}), at::randn({0, 5, 6}), config(6, 32, 64, 2)),
               at::empty({0, 4, 6}), 5, "empty batch");
  expect_close(run_bmm(at::randn({2, 4, 0}), at::randn({2, 0, 6}), config(6, 32, 64, 2)),
               at::zeros({2, 4, 6}), 0, "K = 0");
}

TEST(BmmCpu, DescriptorAndItsSpace) {
  const KernelDescriptor& d = bmm_f32_cpu_descriptor();
  EXPECT_EQ(d.name, "bmm_f32_blocked");
  const ShapeKey key = ShapeKey::parse("aten::bmm(f32[4,40,70]c,f32[4,70,50]c)");
  const LaunchConfig def = d.default_config(key);
  EXPECT_EQ(def.grid.z, 4);
  ASSERT_TRUE(d.can_run(key, def).is_ok()) << def.str();
  EXPECT_DOUBLE_EQ(d.flop_count(key), 2.0 * 4 * 40 * 50 * 70);
  at::manual_seed(2);
  const at::Tensor a = at::randn({4, 40, 70});
  const at::Tensor b = at::randn({4, 70, 50});
  const at::Tensor want = at::bmm(a, b);
  expect_close(run_bmm(a, b, def), want, 70, "default " + def.str());
  const auto points = d.space.enumerate();
  ASSERT_FALSE(points.empty());
  // Every sampled point runs, except a micro-tile width this ISA path lacks: that one is
  // refused with the reason.
  const std::vector<std::int64_t> widths = gemm_cpu_micro_widths();
  for (std::size_t i = 0; i < points.size(); i += std::max<std::size_t>(1, points.size() / 12)) {
    EXPECT_EQ(points[i].get_or("skinny", -1), 0);
    const LaunchConfig full = d.complete(key, points[i]);
    const std::int64_t width = full.get_or("micro_n", 0);
    if (width != 0 && std::find(widths.begin(), widths.end(), width) == widths.end()) {
      const Status st = d.can_run(key, full);
      ASSERT_FALSE(st.is_ok()) << full.str();
      EXPECT_NE(st.reason().find("no micro-kernel that wide"), std::string::npos) << st.reason();
      continue;
    }
    ASSERT_TRUE(d.can_run(key, full).is_ok()) << full.str();
    expect_close(run_bmm(a, b, full), want, 70, full.str());
  }
  // Refusals: skinny, a grid that does not match, a bad tile.
  EXPECT_FALSE(d.can_run(key, config(6, 32, 64, 1, 1)).reason().empty());
  LaunchConfig wrong = d.complete(key, config(6, 32, 64, 1));
  wrong.grid.z = 1;
  EXPECT_FALSE(d.can_run(key, wrong).is_ok());
  EXPECT_FALSE(d.can_run(key, config(7, 32, 64, 1)).is_ok());
  BmmArgs bad;
  at::Tensor out = at::empty({4, 40, 50});
  bad.out = view_of(out);
  bad.mat1 = view_of(a);
  bad.mat2 = view_of(a);
  EXPECT_THROW((void)bmm_f32_cpu(bad, config(6, 32, 64, 1)), ValueError);
}

using Act = std::function<at::Tensor(const at::Tensor&)>;

std::vector<std::pair<Epilogue, Act>> epilogues() {
  return {
      {Epilogue::kNone, [](const at::Tensor& t) { return t; }},
      {Epilogue::kRelu, [](const at::Tensor& t) { return at::relu(t); }},
      {Epilogue::kGelu, [](const at::Tensor& t) { return at::gelu(t); }},
      {Epilogue::kGeluTanh, [](const at::Tensor& t) { return at::gelu(t, "tanh"); }},
      {Epilogue::kSigmoid, [](const at::Tensor& t) { return at::sigmoid(t); }},
      {Epilogue::kSilu, [](const at::Tensor& t) { return at::silu(t); }},
  };
}

at::Tensor run_addmm(const at::Tensor& bias, const at::Tensor& a, const at::Tensor& b, Epilogue e,
                     const LaunchConfig& cfg, bool by_blocks = false) {
  at::Tensor out = at::full({a.size(0), b.size(1)}, NAN);
  AddmmArgs args;
  args.out = view_of(out);
  args.self = view_of(bias);
  args.mat1 = view_of(a);
  args.mat2 = view_of(b);
  args.epilogue = e;
  if (by_blocks) {
    CpuLaunch launch;
    const Status st = prepare_gemm_f32_cpu(args, cfg, launch);
    EXPECT_TRUE(st.is_ok()) << st.reason();
    for (std::int64_t i = launch.blocks - 1; i >= 0; --i) launch.run_block(i);  // any order
  } else {
    const Status st = gemm_f32_cpu(args, cfg);
    EXPECT_TRUE(st.is_ok()) << st.reason();
  }
  return out;
}

TEST(GemmEpilogue, EveryActivationMatchesAten) {
  at::manual_seed(3);
  const at::Tensor a = at::randn({37, 300}) * 0.2;
  const at::Tensor b = at::randn({300, 71}) * 0.2;
  const at::Tensor bias = at::randn({71});
  for (const auto& [e, act] : epilogues()) {
    const at::Tensor want = act(at::addmm(bias, a, b));
    const std::string what = to_string(e);
    // Several K blocks (tile_k 64) so the activation must wait for the last one.
    expect_close(run_addmm(bias, a, b, e, config(12, 32, 64, 2)), want, 300, what + " packed");
    expect_close(run_addmm(bias, a, b, e, config(96, 256, 512, 1), true), want, 300,
                 what + " by blocks");
    const at::Tensor a0 = at::randn({5, 0});
    const at::Tensor b0 = at::randn({0, 71});
    expect_close(run_addmm(bias, a0, b0, e, config(6, 32, 64, 1)), act(at::addmm(bias, a0, b0)), 0,
                 what + " K = 0");
    const at::Tensor a3 = a.slice(0, 0, 3);
    expect_close(run_addmm(bias, a3, b, e, config(6, 64, 128, 2, 1)), act(at::addmm(bias, a3, b)),
                 300, what + " skinny");
  }
  EXPECT_STREQ(to_string(Epilogue::kGeluTanh), "gelu_tanh");
}

}  // namespace
}  // namespace ka::kernels
