// The fused CPU attention against libtorch's softmax(scale * q @ kᵀ + mask) @ v: batch
// dimensions, strided operands (heads split from [B, S, H, D]), full, broadcast and causal
// -inf masks, edges of every block size, every point of its space on the active ISA path
// (.ci/run forces each path with KA_CPU_ISA), and its descriptor.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <ka/core/error.hpp>
#include <ka/kernels/attention.hpp>
#include <ka/kernels/gemm.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "torch_view.hpp"

namespace ka::kernels {
namespace {

using test::view_of;

LaunchConfig config(std::int64_t bq, std::int64_t bk, std::int64_t micro_n, std::int64_t threads) {
  LaunchConfig c;
  c.set("block_q", bq).set("block_k", bk).set("micro_n", micro_n).set("threads", threads);
  return c;
}

at::Tensor reference(const at::Tensor& q, const at::Tensor& kt, const at::Tensor& v,
                     const at::Tensor& mask, double scale, const at::Tensor& fill = {},
                     double fill_value = 0.0) {
  at::Tensor s = at::matmul(q.to(at::kDouble), kt.to(at::kDouble)) * scale;
  if (mask.defined()) s = s + mask.to(at::kDouble);
  if (fill.defined()) s = s.masked_fill(fill, fill_value);
  return at::matmul(at::softmax(s, -1), v.to(at::kDouble)).to(at::kFloat);
}

// A bool TensorView (view_of labels every view float32).
TensorView bool_view(const at::Tensor& t) {
  TensorView v = view_of(t);
  if (t.defined()) v.dtype = DType::kBool;
  return v;
}

// Runs the kernel into a NaN-filled contiguous out; the Status must be ok.
at::Tensor run(const at::Tensor& q, const at::Tensor& kt, const at::Tensor& v,
               const at::Tensor& mask, float scale, const LaunchConfig& cfg,
               const at::Tensor& fill = {}, float fill_value = 0.0F, bool where_false = false) {
  auto sizes = q.sizes().vec();
  sizes.back() = v.size(-1);
  at::Tensor out = at::full(sizes, NAN);
  AttentionArgs a{view_of(out),  view_of(q), view_of(kt),     view_of(v),
                  view_of(mask), scale,      bool_view(fill), fill_value, where_false};
  const Status st = attention_f32_cpu(a, cfg);
  EXPECT_TRUE(st.is_ok()) << st.reason();
  return out;
}

void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_TRUE(at::allclose(got, want, 1e-4, 2e-5, /*equal_nan=*/true))
      << what << ": max abs error " << (got - want).abs().nan_to_num(1e9).max().item<float>();
}

// Heads as a model makes them: [B, S, H, D] split and transposed to [B, H, S, D] (strided).
at::Tensor heads(std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
  return at::randn({b, s, h, d}).transpose(1, 2);
}

TEST(AttentionCpu, MatchesLibtorchAcrossShapesMasksAndLayouts) {
  at::manual_seed(7);
  struct Case {
    std::int64_t b, h, sq, sk, d, dv;
  };
  for (const Case c : {Case{1, 2, 1, 1, 64, 64}, Case{2, 3, 7, 5, 16, 24}, Case{1, 2, 50, 130, 64, 64},
                       Case{2, 2, 97, 300, 40, 40}, Case{1, 1, 200, 33, 8, 72}}) {
    const at::Tensor q = heads(c.b, c.sq, c.h, c.d);
    const at::Tensor k = heads(c.b, c.sk, c.h, c.d);
    const at::Tensor kt = k.transpose(-2, -1);
    const at::Tensor v = heads(c.b, c.sk, c.h, c.dv);
    const float scale = 1.0F / std::sqrt(static_cast<float>(c.d));
    const at::Tensor full_mask = at::randn({c.b, c.h, c.sq, c.sk});
    const at::Tensor padding = (at::rand({c.b, 1, 1, c.sk}) > 0.8).to(at::kFloat) * -1e4;
    const at::Tensor causal =
        at::full({c.sq, c.sk}, -std::numeric_limits<float>::infinity()).triu(1 + c.sk - c.sq);
    const std::string what = "b=" + std::to_string(c.b) + " h=" + std::to_string(c.h) +
                             " sq=" + std::to_string(c.sq) + " sk=" + std::to_string(c.sk) +
                             " d=" + std::to_string(c.d) + " dv=" + std::to_string(c.dv);
    const LaunchConfig cfg = config(24, 64, 0, 2);
    expect_close(run(q, kt, v, {}, scale, cfg), reference(q, kt, v, {}, scale), what + " no mask");
    expect_close(run(q, kt, v, full_mask, scale, cfg), reference(q, kt, v, full_mask, scale),
                 what + " full mask");
    const at::Tensor pad = padding.expand({c.b, c.h, c.sq, c.sk});
    expect_close(run(q, kt, v, pad, scale, cfg), reference(q, kt, v, pad, scale),
                 what + " broadcast padding mask");
    const at::Tensor causal4 = causal.expand({c.b, c.h, c.sq, c.sk});
    expect_close(run(q, kt, v, causal4, scale, cfg), reference(q, kt, v, causal4, scale),
                 what + " causal -inf mask");
    // 3-D operands (one batch dimension) and a contiguous k copy as key_t.
    const at::Tensor q3 = q.reshape({-1, c.sq, c.d});
    const at::Tensor kt3 = kt.contiguous().reshape({-1, c.d, c.sk});
    const at::Tensor v3 = v.reshape({-1, c.sk, c.dv});
    expect_close(run(q3, kt3, v3, {}, 0.5F, cfg), reference(q3, kt3, v3, {}, 0.5), what + " 3-D");
  }
}

TEST(AttentionCpu, ABoolFillMaskIsMaskedFill) {
  at::manual_seed(13);
  const at::Tensor q = heads(2, 45, 2, 32);
  const at::Tensor kt = heads(2, 130, 2, 32).transpose(-2, -1);
  const at::Tensor v = heads(2, 130, 2, 32);
  // GPT-2's causal form: masked_fill(bias == 0, -inf) and (-1e4), broadcast over batch and
  // heads; and a padding form per sequence, with an additive mask beside it.
  const at::Tensor causal = at::ones({45, 130}, at::kBool).triu(1 + 130 - 45);
  const at::Tensor causal4 = causal.expand({2, 2, 45, 130});
  const LaunchConfig cfg = config(24, 64, 0, 2);
  for (const double value : {-std::numeric_limits<double>::infinity(), -1e4}) {
    expect_close(run(q, kt, v, {}, 0.125F, cfg, causal4, static_cast<float>(value)),
                 reference(q, kt, v, {}, 0.125, causal4, value),
                 "causal fill " + std::to_string(value));
  }
  const at::Tensor padding = (at::rand({2, 1, 1, 130}) > 0.7).expand({2, 2, 45, 130});
  const at::Tensor additive = at::randn({45, 130}).expand({2, 2, 45, 130});
  expect_close(run(q, kt, v, additive, 0.125F, cfg, padding, -3.0F),
               reference(q, kt, v, additive, 0.125, padding, -3.0), "padding fill and a mask");
}

TEST(AttentionCpu, AWhereFillFillsWhereTheMaskIsFalse) {
  at::manual_seed(17);
  const at::Tensor q = heads(1, 70, 3, 16);
  const at::Tensor kt = heads(1, 150, 3, 16).transpose(-2, -1);
  const at::Tensor v = heads(1, 150, 3, 16);
  // Hugging Face GPT-2's form: where(causal keep-mask, scores, finfo(float).min), whose key
  // blocks above the diagonal are skipped (Note [Masked key blocks]); and -1e4 and -inf.
  const at::Tensor keep = at::ones({70, 150}, at::kBool).tril(150 - 70).expand({1, 3, 70, 150});
  for (const std::int64_t block_k : {16, 64}) {
    const LaunchConfig cfg = config(24, block_k, 0, 2);
    for (const double value : {static_cast<double>(std::numeric_limits<float>::lowest()), -1e4,
                               -std::numeric_limits<double>::infinity()}) {
      expect_close(run(q, kt, v, {}, 0.25F, cfg, keep, static_cast<float>(value), true),
                   reference(q, kt, v, {}, 0.25, keep.logical_not(), value),
                   "causal where " + std::to_string(value) + " block_k " +
                       std::to_string(block_k));
    }
  }
  // Rows that keep no key: a finite fill gives them softmax's uniform weights over every
  // key (the deferred blocks run after all), a -inf fill NaN, as ATen does; the other rows
  // of their query block are unchanged.
  at::Tensor some = at::ones({70, 150}, at::kBool).tril(150 - 70);
  some.index_put_({at::indexing::Slice(30, 33)}, false);
  const at::Tensor some4 = some.expand({1, 3, 70, 150});
  const LaunchConfig cfg = config(24, 16, 0, 1);
  for (const double value : {static_cast<double>(std::numeric_limits<float>::lowest()), -1e4,
                             -std::numeric_limits<double>::infinity()}) {
    expect_close(run(q, kt, v, {}, 0.25F, cfg, some4, static_cast<float>(value), true),
                 reference(q, kt, v, {}, 0.25, some4.logical_not(), value),
                 "rows keeping no key, fill " + std::to_string(value));
  }
}

TEST(AttentionCpu, EveryPointOfItsSpaceRunsAndAgrees) {
  at::manual_seed(11);
  const at::Tensor q = heads(1, 70, 2, 64);
  const at::Tensor kt = heads(1, 300, 2, 64).transpose(-2, -1);
  const at::Tensor v = heads(1, 300, 2, 64);
  const at::Tensor mask = at::randn({70, 300}).expand({1, 2, 70, 300});
  const at::Tensor want = reference(q, kt, v, mask, 0.125);
  const KernelDescriptor& d = attention_f32_cpu_descriptor();
  const ShapeKey key("fused::attention", {{DType::kFloat32, {1, 2, 70, 64}, false},
                                          {DType::kFloat32, {1, 2, 64, 300}, false},
                                          {DType::kFloat32, {1, 2, 300, 64}, false},
                                          {DType::kFloat32, {1, 2, 70, 300}, false}});
  const auto widths = gemm_cpu_micro_widths();
  int ran = 0;
  for (const LaunchConfig& point : d.space.enumerate()) {
    const LaunchConfig full = d.complete(key, point);
    const std::int64_t w = point.get_or("micro_n", 0);
    const bool has_width = w == 0 || std::find(widths.begin(), widths.end(), w) != widths.end();
    const Status can = d.can_run(key, full);
    ASSERT_EQ(can.is_ok(), has_width) << point.str() << ": " << can.reason();
    if (!can) continue;
    expect_close(run(q, kt, v, mask, 0.125F, full), want, point.str());
    ++ran;
  }
  EXPECT_GT(ran, 0);
}

TEST(AttentionCpu, RowsWhollyMaskedGiveNaNAsSoftmaxDoes) {
  const at::Tensor q = at::randn({1, 8, 16});
  const at::Tensor kt = at::randn({1, 16, 10});
  const at::Tensor v = at::randn({1, 10, 16});
  at::Tensor mask = at::zeros({1, 8, 10});
  mask[0][3].fill_(-std::numeric_limits<float>::infinity());
  const at::Tensor got = run(q, kt, v, mask, 1.0F, config(6, 4, 0, 1));
  EXPECT_TRUE(got[0][3].isnan().all().item<bool>());
  expect_close(got, reference(q, kt, v, mask, 1.0), "one row wholly masked");
}

TEST(AttentionCpu, DescriptorReadsItsShapeKey) {
  const KernelDescriptor& d = attention_f32_cpu_descriptor();
  EXPECT_EQ(d.ops, std::vector<std::string>{"fused::attention"});
  const ShapeKey key = ShapeKey::parse(
      "fused::attention(f32[2,12,512,64]s,f32[2,12,64,512]s,f32[2,12,512,64]s)");
  const AttentionShape s = attention_shape(key);
  EXPECT_EQ(s.batch, 24);
  EXPECT_EQ(s.sq, 512);
  EXPECT_EQ(s.sk, 512);
  EXPECT_EQ(s.d, 64);
  EXPECT_FALSE(s.mask);
  EXPECT_DOUBLE_EQ(d.flop_count(key), 2.0 * 24 * 512 * 512 * 128);
  const LaunchConfig def = d.default_config(key);
  EXPECT_TRUE(d.can_run(key, def).is_ok()) << def.str();
  // Grid: batch entries x spans of query blocks, at most one span per query block.
  EXPECT_EQ(def.grid.y, 24) << def.str();
  EXPECT_GE(def.grid.x, 1) << def.str();
  EXPECT_LE(def.grid.x, (512 + def.block.y - 1) / def.block.y) << def.str();
  // The canonical form is a fixed point and caps blocks at the shape's sizes.
  const ShapeKey small = ShapeKey::parse(
      "fused::attention(f32[1,10,8]c,f32[1,8,20]c,f32[1,20,8]c)");
  const LaunchConfig c = d.canonical(small, config(192, 512, 0, 1));
  EXPECT_EQ(c.get_or("block_q", 0), 12);
  EXPECT_EQ(c.get_or("block_k", 0), 20);
  EXPECT_EQ(d.canonical(small, c), c);
  EXPECT_THROW(attention_shape(ShapeKey::parse("fused::attention(f32[8,64]c,f32[64,8]c,f32[8,64]c)")),
               ValueError);
}

TEST(AttentionCpu, InconsistentOperandsAreNamed) {
  const at::Tensor q = at::randn({1, 4, 8});
  const at::Tensor v = at::randn({1, 6, 8});
  at::Tensor out = at::empty({1, 4, 8});
  const at::Tensor bad_kt = at::randn({1, 7, 6});
  AttentionArgs a{view_of(out), view_of(q), view_of(bad_kt), view_of(v), {}, 1.0F, {}, 0.0F};
  try {
    (void)attention_f32_cpu(a, config(6, 64, 0, 1));
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("key_t"), std::string::npos) << e.what();
  }
  const at::Tensor kt = at::randn({1, 8, 6});
  a = {view_of(out), view_of(q), view_of(kt), view_of(v), {}, 1.0F, {}, 0.0F};
  a.query.dtype = DType::kBFloat16;
  EXPECT_THROW((void)attention_f32_cpu(a, config(6, 64, 0, 1)), ValueError);
}

}  // namespace
}  // namespace ka::kernels

