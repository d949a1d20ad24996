// The CPU softmax, layer_norm and sum against ATen: every dim, fused prologues (scale + mask,
// residual add), optional affine parameters, every reduction dim set, strided inputs, thread
// counts and the points of each descriptor's space.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <ka/core/error.hpp>
#include <ka/core/fingerprint.hpp>
#include <ka/kernels/cpu_launch.hpp>
#include <ka/kernels/reduction.hpp>
#include <string>
#include <vector>

#include "alloc_counter.hpp"
#include "pool_warmup.hpp"
#include "isa_paths.hpp"
#include "torch_view.hpp"

namespace ka::kernels {
namespace {

using test::view_of;

// `stream` and `prefetch` are tunables of softmax and layer_norm only; sum ignores them.
LaunchConfig config(std::int64_t rows_per_block, std::int64_t threads, std::int64_t stream = 0,
                    std::int64_t prefetch = 1) {
  LaunchConfig c;
  c.set("rows_per_block", rows_per_block).set("threads", threads).set("stream", stream);
  c.set("prefetch", prefetch);
  return c;
}

void expect_close(const at::Tensor& got, const at::Tensor& want, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  if (got.numel() == 0) return;
  EXPECT_TRUE(at::allclose(got, want, rtol, atol, /*equal_nan=*/true))
      << what << ": max abs error " << (got - want).abs().max().item<float>();
}

EwProgram identity() {
  EwProgram p;
  p.set_result(p.input(0));
  return p;
}

// x * scale + mask
EwProgram scale_mask(float scale) {
  EwProgram p;
  p.set_result(p.binary(EwOp::kAdd, p.binary(EwOp::kMul, p.input(0), p.scalar(scale)), p.input(1)));
  return p;
}

at::Tensor run_softmax(const at::Tensor& x, int dim, const LaunchConfig& cfg,
                       const at::Tensor& mask = at::Tensor(), float scale = 1.0F) {
  at::Tensor out = at::full(x.sizes(), NAN);
  SoftmaxArgs args;
  args.out = view_of(out);
  args.dim = dim;
  args.inputs[0] = view_of(x);
  if (mask.defined()) {
    args.prologue = scale_mask(scale);
    args.inputs[1] = broadcast_view(view_of(mask), args.out.sizes.data(), args.out.ndim);
  } else {
    args.prologue = identity();
  }
  const Status st = softmax_f32_cpu(args, cfg);
  EXPECT_TRUE(st.is_ok()) << st.reason();
  return out;
}

TEST(SoftmaxCpu, EveryDimOfA3dTensor) {
  at::manual_seed(1);
  const at::Tensor x = at::randn({5, 37, 300}) * 3;
  for (int dim = 0; dim < 3; ++dim) {
    for (const auto& cfg : {config(1, 1), config(7, 2), config(3, 2, /*stream=*/1)}) {
      expect_close(run_softmax(x, dim, cfg), at::softmax(x, dim), 1e-5, 1e-7,
                   "dim " + std::to_string(dim) + " " + cfg.str());
    }
  }
  // Non-contiguous input.
  const at::Tensor xt = x.transpose(0, 2);
  expect_close(run_softmax(xt, 2, config(4, 2)), at::softmax(xt, 2), 1e-5, 1e-7, "transposed");
  // Long rows (many chunks, the running max grows across them).
  const at::Tensor ramp = at::linspace(-20, 40, 5000).reshape({2, 2500});
  expect_close(run_softmax(ramp, 1, config(1, 1)), at::softmax(ramp, 1), 1e-5, 1e-8, "ramp");
  expect_close(run_softmax(ramp, 1, config(1, 1, /*stream=*/1)), at::softmax(ramp, 1), 1e-5,
               1e-8, "ramp, streamed");
  // Rows past 1024 chunks keep x and take a second exp in the normalize pass.
  const at::Tensor longest = at::randn({2, 300000}) * 4;
  // (against a double reference: ATen's float sum over 300000 terms is off by ~1e-4 relative)
  expect_close(run_softmax(longest, 1, config(1, 2, /*stream=*/1)),
               at::softmax(longest.to(at::kDouble), 1).to(at::kFloat), 1e-5, 1e-9,
               "rows of 300000");
}

TEST(SoftmaxCpu, EveryIsaPathMatchesAten) {
  // The exp-and-sum runs on AVX-512 when active, else the portable loop.
  at::manual_seed(11);
  const at::Tensor x = at::randn({7, 1001}) * 5;
  for (const std::string& isa : test::runnable_isas()) {
    const test::IsaGuard guard(isa);
    for (const auto& cfg : {config(2, 2), config(3, 1, /*stream=*/1)}) {
      expect_close(run_softmax(x, 1, cfg), at::softmax(x, 1), 1e-5, 1e-7,
                   isa + " " + cfg.str());
    }
  }
}

// Runs a row kernel (args already set but for out and inputs[0] = x) three times: into an out
// that starts 12 bytes past a 64-byte line (a streamed row's head goes through ordinary stores)
// between NaN guards that must stay untouched, into a fresh aligned out, and in place (out is
// x); all match `want`. The three prefetch the next row nowhere, into L2 and into L1.
template <class Args, class Kernel>
void expect_row_kernel(Args args, Kernel kernel, const at::Tensor& x, const at::Tensor& want,
                       std::int64_t stream, double rtol, double atol, const std::string& what) {
  const at::Tensor base = at::full({x.numel() + 8}, NAN);
  const at::Tensor out = base.slice(0, 3, 3 + x.numel()).view(x.sizes());
  args.out = view_of(out);
  args.inputs[0] = view_of(x);
  ASSERT_TRUE(kernel(args, config(2, 2, stream, /*prefetch=*/0)).is_ok()) << what;
  expect_close(out, want, rtol, atol, what);
  EXPECT_TRUE(base.slice(0, 0, 3).isnan().all().item<bool>()) << what << ": wrote before out";
  EXPECT_TRUE(base.slice(0, 3 + x.numel()).isnan().all().item<bool>()) << what << ": wrote after";
  // Rows on 64-byte lines (libtorch's allocation, n a multiple of 16), several per block: a
  // streamed softmax writes each row during the next one's exp pass.
  const at::Tensor aligned = at::full(x.sizes(), NAN);
  args.out = view_of(aligned);
  ASSERT_TRUE(kernel(args, config(4, 2, stream, /*prefetch=*/2)).is_ok()) << what;
  expect_close(aligned, want, rtol, atol, what + " aligned, 4 rows per block");
  const at::Tensor inplace = x.clone();
  args.out = view_of(inplace);
  args.inputs[0] = args.out;
  ASSERT_TRUE(kernel(args, config(3, 2, stream, /*prefetch=*/1)).is_ok()) << what;
  expect_close(inplace, want, rtol, atol, what + " in place");
}

// Rows around the AVX-512 row kernel's edges (a vector, 64 elements, its 2048-element sum
// blocks), streamed into an out whose rows start off a 64-byte line, and in place (out is x):
// every ISA path matches ATen and writes nothing outside out. A NaN poisons its row only.
TEST(SoftmaxCpu, RowEdgesStreamingAndInPlaceOnEveryIsaPath) {
  at::manual_seed(13);
  for (const std::string& isa : test::runnable_isas()) {
    const test::IsaGuard guard(isa);
    for (const std::int64_t n : {1, 15, 17, 64, 65, 2049, 4100, 4096}) {
      const at::Tensor x = at::randn({9, n}) * 4;
      const at::Tensor want = at::softmax(x, 1);
      for (const std::int64_t stream : {0, 1}) {
        const std::string what =
            isa + " n=" + std::to_string(n) + " stream=" + std::to_string(stream);
        SoftmaxArgs args;
        args.prologue = identity();
        args.dim = 1;
        expect_row_kernel(args, softmax_f32_cpu, x, want, stream, 1e-5, 1e-7, what);
      }
    }
    at::Tensor with_nan = at::randn({3, 100});
    with_nan[1][37] = NAN;
    const at::Tensor got = run_softmax(with_nan, 1, config(1, 1));
    EXPECT_TRUE(got[1].isnan().all().item<bool>()) << isa;
    EXPECT_FALSE(got[0].isnan().any().item<bool>()) << isa;
    EXPECT_FALSE(got[2].isnan().any().item<bool>()) << isa;
  }
}

TEST(SoftmaxCpu, ScaleAndMaskPrologue) {
  at::manual_seed(2);
  const at::Tensor x = at::randn({2, 4, 33, 257});
  at::Tensor mask = at::zeros({33, 257});
  mask.masked_fill_(at::rand({33, 257}) < 0.3, -INFINITY);
  mask.select(1, 0).fill_(0.0F);  // no row is fully masked
  const float scale = 0.125F;
  expect_close(run_softmax(x, 3, config(16, 2), mask, scale), at::softmax(x * scale + mask, 3),
               1e-5, 1e-7, "scale+mask");
  // The same over a non-last dim (column tiles), with the mask broadcast along other dims.
  at::Tensor mask1 = at::zeros({1, 4, 33, 1});
  mask1.masked_fill_(at::rand({1, 4, 33, 1}) < 0.3, -INFINITY);
  mask1.select(2, 0).fill_(0.0F);
  expect_close(run_softmax(x, 2, config(300, 2), mask1, scale), at::softmax(x * scale + mask1, 2),
               1e-5, 1e-7, "scale+mask over dim 2");
  const at::Tensor mask2 = at::randn({257});
  expect_close(run_softmax(x, 1, config(5, 1), mask2, scale), at::softmax(x * scale + mask2, 1),
               1e-5, 1e-7, "scale+row mask over dim 1");
  // One mask value per row (stride 0 along the row), the last dim: on AVX-512 the prologue
  // runs in vector groups with that value broadcast (Note [Fused vector groups]).
  const at::Tensor per_row = at::randn({1, 4, 33, 1}) * 4;
  expect_close(run_softmax(x, 3, config(16, 2), per_row, scale),
               at::softmax(x * scale + per_row, 3), 1e-5, 1e-7, "scale+per-row value over dim 3");
  // A row fully masked is NaN, as in ATen.
  at::Tensor all = at::full({1, 8}, -INFINITY);
  const at::Tensor got = run_softmax(at::zeros({1, 8}), 1, config(1, 1), all, 1.0F);
  EXPECT_TRUE(got.isnan().all().item<bool>());
}

// A masked row (0 / -1e4, as padding masks are) gives exact zeros at the masked positions,
// not subnormals (Note [No subnormal exp]), on every ISA path.
TEST(SoftmaxCpu, MaskedPositionsAreExactZeros) {
  at::manual_seed(12);
  const at::Tensor x = at::randn({5, 517});
  const at::Tensor mask = at::where(at::rand({517}) < 0.3, -1e4, 0.0).to(at::kFloat);
  for (const std::string& isa : test::runnable_isas()) {
    const test::IsaGuard guard(isa);
    const at::Tensor out = run_softmax(x, 1, config(2, 2), mask);
    expect_close(out, at::softmax(x + mask, 1), 1e-5, 1e-7, isa);
    EXPECT_TRUE((out.masked_select((mask < 0).expand_as(out)) == 0).all().item<bool>()) << isa;
  }
}

TEST(SoftmaxCpu, EmptyAndScalar) {
  const at::Tensor e = at::empty({0, 5});
  expect_close(run_softmax(e, 1, config(1, 1)), at::softmax(e, 1), 1e-5, 1e-7, "empty");
  const at::Tensor s = at::randn({});
  expect_close(run_softmax(s, 0, config(1, 1)), at::softmax(s, 0), 1e-5, 1e-7, "0-d");
  SoftmaxArgs bad;
  bad.out = view_of(at::empty({3, 4}));
  bad.inputs[0] = bad.out;
  bad.prologue = identity();
  bad.dim = 2;
  EXPECT_THROW((void)softmax_f32_cpu(bad, config(1, 1)), ValueError);
}

at::Tensor run_layer_norm(const at::Tensor& x, int normalized_dims, const at::Tensor& w,
                          const at::Tensor& b, const LaunchConfig& cfg,
                          const at::Tensor& residual = at::Tensor()) {
  at::Tensor out = at::full(x.sizes(), NAN);
  LayerNormArgs args;
  args.out = view_of(out);
  args.normalized_dims = normalized_dims;
  args.inputs[0] = view_of(x);
  if (residual.defined()) {
    args.inputs[1] = broadcast_view(view_of(residual), args.out.sizes.data(), args.out.ndim);
    args.prologue.set_result(
        args.prologue.binary(EwOp::kAdd, args.prologue.input(0), args.prologue.input(1)));
  } else {
    args.prologue = identity();
  }
  args.weight = view_of(w);
  args.bias = view_of(b);
  args.eps = 1e-5F;
  const Status st = layer_norm_f32_cpu(args, cfg);
  EXPECT_TRUE(st.is_ok()) << st.reason();
  return out;
}

TEST(LayerNormCpu, WithAndWithoutAffine) {
  at::manual_seed(3);
  const at::Tensor x = at::randn({4, 7, 300}) * 2 + 3;
  for (int k = 1; k <= 2; ++k) {
    const std::vector<std::int64_t> norm(x.sizes().end() - k, x.sizes().end());
    const at::Tensor w = at::randn(norm);
    const at::Tensor b = at::randn(norm);
    const std::string what = "normalized_dims " + std::to_string(k);
    expect_close(run_layer_norm(x, k, w, b, config(3, 2)), at::layer_norm(x, norm, w, b, 1e-5),
                 1e-5, 1e-5, what + " affine");
    expect_close(run_layer_norm(x, k, w, b, config(3, 2, /*stream=*/1)),
                 at::layer_norm(x, norm, w, b, 1e-5), 1e-5, 1e-5, what + " affine, streamed");
    expect_close(run_layer_norm(x, k, at::Tensor(), at::Tensor(), config(1, 1)),
                 at::layer_norm(x, norm, {}, {}, 1e-5), 1e-5, 1e-5, what + " plain");
    expect_close(run_layer_norm(x, k, w, at::Tensor(), config(2, 2)),
                 at::layer_norm(x, norm, w, {}, 1e-5), 1e-5, 1e-5, what + " weight only");
  }
}

// As SoftmaxCpu.RowEdgesStreamingAndInPlaceOnEveryIsaPath, for layer_norm with and without
// weight and bias, and rows far from zero mean (x + 1000: the variance pass must not cancel).
TEST(LayerNormCpu, RowEdgesStreamingAndInPlaceOnEveryIsaPath) {
  at::manual_seed(14);
  for (const std::string& isa : test::runnable_isas()) {
    const test::IsaGuard guard(isa);
    for (const std::int64_t n : {1, 15, 17, 64, 65, 2049, 4100}) {
      const at::Tensor x = at::randn({3, n}) * 2 + 1000;
      const at::Tensor w = at::randn({n});
      const at::Tensor b = at::randn({n});
      for (const std::int64_t stream : {0, 1}) {
        for (const bool affine : {false, true}) {
          const std::string what = isa + " n=" + std::to_string(n) + " stream=" +
                                   std::to_string(stream) + (affine ? " affine" : " plain");
          // One element is its own mean: the result is b (or 0) exactly. (ATen returns its
          // float rounding of the mean of ~1000 magnified by rstd = 316 there, up to 0.02.)
          const at::Tensor want =
              n == 1 ? (affine ? b.expand({3, 1}).contiguous() : at::zeros({3, 1}))
              : affine ? at::layer_norm(x, {n}, w, b, 1e-5)
                       : at::layer_norm(x, {n}, {}, {}, 1e-5);
          LayerNormArgs args;
          args.prologue = identity();
          if (affine) {
            args.weight = view_of(w);
            args.bias = view_of(b);
          }
          // x ~ 1000 ± 2: float rounds x itself by 6e-5, which the normalization magnifies.
          expect_row_kernel(args, layer_norm_f32_cpu, x, want, stream, 1e-4, 2e-4, what);
        }
      }
    }
  }
}

TEST(LayerNormCpu, ResidualAddPrologueAndStridedInput) {
  at::manual_seed(4);
  const at::Tensor x = at::randn({6, 1030});
  const at::Tensor r = at::randn({6, 1030});
  const at::Tensor w = at::randn({1030});
  const at::Tensor b = at::randn({1030});
  expect_close(run_layer_norm(x, 1, w, b, config(2, 2), r),
               at::layer_norm(x + r, {1030}, w, b, 1e-5), 1e-5, 1e-5, "residual");
  expect_close(run_layer_norm(x, 1, w, b, config(2, 2, /*stream=*/1), r),
               at::layer_norm(x + r, {1030}, w, b, 1e-5), 1e-5, 1e-5, "residual, streamed");
  const at::Tensor xt = at::randn({50, 9}).t();  // normalized dim strided
  const at::Tensor wt = at::randn({100}).slice(0, 0, 100, 2);
  expect_close(run_layer_norm(xt, 1, wt, at::Tensor(), config(4, 1)),
               at::layer_norm(xt, {50}, wt, {}, 1e-5), 1e-5, 1e-5, "transposed");
  const at::Tensor x3 = at::randn({5, 6, 7}).permute({2, 0, 1});  // non-collapsible row
  expect_close(run_layer_norm(x3, 2, at::Tensor(), at::Tensor(), config(1, 2)),
               at::layer_norm(x3, {5, 6}, {}, {}, 1e-5), 1e-5, 1e-5, "permuted 2-d rows");
  // Bad weight shape.
  LayerNormArgs bad;
  bad.out = view_of(at::empty({3, 4}));
  bad.inputs[0] = bad.out;
  bad.prologue = identity();
  const at::Tensor w3 = at::randn({3});
  bad.weight = view_of(w3);
  EXPECT_THROW((void)layer_norm_f32_cpu(bad, config(1, 1)), ValueError);
}

at::Tensor run_sum(const at::Tensor& x, std::uint64_t mask, const LaunchConfig& cfg) {
  std::vector<std::int64_t> sizes(x.sizes().begin(), x.sizes().end());
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (((mask >> d) & 1U) != 0) sizes[d] = 1;
  }
  at::Tensor out = at::full(sizes, NAN);
  SumArgs args;
  args.out = view_of(out);
  args.in = view_of(x);
  args.reduce_mask = mask;
  const Status st = sum_f32_cpu(args, cfg);
  EXPECT_TRUE(st.is_ok()) << st.reason();
  return out;
}

at::Tensor ref_sum(const at::Tensor& x, std::uint64_t mask) {
  std::vector<std::int64_t> dims;
  for (std::int64_t d = 0; d < x.dim(); ++d) {
    if (((mask >> d) & 1U) != 0) dims.push_back(d);
  }
  if (dims.empty()) return x.clone();
  return at::sum(x.to(at::kDouble), dims, /*keepdim=*/true).to(at::kFloat);
}

TEST(SumCpu, EveryDimSet) {
  at::manual_seed(5);
  const at::Tensor x = at::randn({6, 50, 70});
  const std::vector<at::Tensor> inputs = {x, x.permute({2, 0, 1}), x.slice(2, 0, 70, 3)};
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    for (std::uint64_t mask = 0; mask < 8; ++mask) {
      for (const auto& cfg : {config(1, 1), config(16, 2)}) {
        expect_close(
            run_sum(inputs[i], mask, cfg), ref_sum(inputs[i], mask), 1e-5, 1e-4,
            "input " + std::to_string(i) + " mask " + std::to_string(mask) + " " + cfg.str());
      }
    }
  }
}

TEST(SumCpu, LongReductionsStayAccurate) {
  at::manual_seed(6);
  const at::Tensor x = at::rand({3, 200000});
  expect_close(run_sum(x, 2, config(1, 2)), ref_sum(x, 2), 1e-6, 1e-3, "rows");
  const at::Tensor y = at::rand({100000, 3});
  expect_close(run_sum(y, 1, config(1, 2)), ref_sum(y, 1), 1e-6, 1e-3, "columns");
  expect_close(run_sum(at::empty({0, 4}), 1, config(1, 1)), at::zeros({1, 4}), 0, 0, "empty");
  expect_close(run_sum(at::empty({4, 0}), 2, config(1, 1)), at::zeros({4, 1}), 0, 0, "zero-length");
}

// The sum's paths on every ISA path: rows split over blocks when there are fewer outputs
// than threads (Note [Split sums]; contiguous and strided rows, odd lengths), rows read four
// at a time (Note [Row sums]) with 1-3 left over, column strips wider than one strip with a
// row count that is not a multiple of four (Note [Column sums]).
TEST(SumCpu, SplitMultiRowAndColumnPathsOnEveryIsaPath) {
  at::manual_seed(8);
  for (const std::string& isa : test::runnable_isas()) {
    const test::IsaGuard guard(isa);
    for (const int threads : {1, 2, 4}) {
      const LaunchConfig cfg = config(1, threads);
      const std::string what = " [" + isa + ", " + std::to_string(threads) + " threads]";
      for (const std::int64_t n : {1, 15, 8195, 262147, 1048576}) {
        const at::Tensor x = at::rand({n}) - 0.25;
        expect_close(run_sum(x, 1, cfg), ref_sum(x, 1), 1e-5, 1e-3,
                     "all of " + std::to_string(n) + what);
      }
      const at::Tensor few = at::rand({3, 200003});
      expect_close(run_sum(few, 2, cfg), ref_sum(few, 2), 1e-5, 1e-3, "3 long rows" + what);
      const at::Tensor strided = at::rand({600006}).slice(0, 0, 600006, 2);
      expect_close(run_sum(strided, 1, cfg), ref_sum(strided, 1), 1e-5, 1e-3,
                   "strided row" + what);
      for (const auto& [rows, cols] : std::vector<std::pair<std::int64_t, std::int64_t>>{
               {7, 1000}, {5, 37}, {9, 4099}}) {
        const at::Tensor r = at::randn({rows, cols});
        expect_close(run_sum(r, 2, config(16, threads)), ref_sum(r, 2), 1e-5, 1e-4,
                     std::to_string(rows) + " rows of " + std::to_string(cols) + what);
      }
      const at::Tensor c = at::randn({1001, 1030});
      expect_close(run_sum(c, 1, config(16, threads)), ref_sum(c, 1), 1e-5, 1e-3,
                   "columns of 1001 x 1030" + what);
      // Wider than one strip of 4096 (a block of several strips), and blocks of outputs that
      // cross the kept dims' rows (x.sum(1) of a 3-d tensor: 3 x 700 outputs).
      const at::Tensor wide = at::randn({37, 9000});
      expect_close(run_sum(wide, 1, config(1, threads)), ref_sum(wide, 1), 1e-5, 1e-4,
                   "columns of 37 x 9000" + what);
      const at::Tensor cube = at::randn({3, 50, 700});
      expect_close(run_sum(cube, 2, config(1, threads)), ref_sum(cube, 2), 1e-5, 1e-4,
                   "dim 1 of 3 x 50 x 700" + what);
    }
  }
}

TEST(ReductionCpu, EveryPointOfEachSpaceRuns) {
  at::manual_seed(7);
  const at::Tensor x = at::randn({9, 130});
  const ShapeKey key("aten::_softmax", {{DType::kFloat32, {9, 130}, true}});
  for (const KernelDescriptor* d : {&softmax_f32_cpu_descriptor(), &layer_norm_f32_cpu_descriptor(),
                                    &sum_f32_cpu_descriptor()}) {
    const auto points = d->space.enumerate();
    ASSERT_FALSE(points.empty()) << d->name;
    const LaunchConfig def = d->default_config(key);
    EXPECT_TRUE(d->can_run(key, def).is_ok()) << d->name << " " << def.str();
    EXPECT_EQ(def.get_or("threads", 0), 1) << d->name << ": small calls stay on one thread";
    EXPECT_FALSE(d->can_run(key, config(0, 1)).reason().empty()) << d->name;
    for (const auto& point : points) {
      const LaunchConfig full = d->complete(key, point);
      ASSERT_TRUE(d->can_run(key, full).is_ok()) << d->name << " " << full.str();
      if (d == &softmax_f32_cpu_descriptor()) {
        expect_close(run_softmax(x, 1, full), at::softmax(x, 1), 1e-5, 1e-7, full.str());
      } else if (d == &layer_norm_f32_cpu_descriptor()) {
        expect_close(run_layer_norm(x, 1, at::Tensor(), at::Tensor(), full),
                     at::layer_norm(x, {130}, {}, {}, 1e-5), 1e-5, 1e-5, full.str());
      } else {
        expect_close(run_sum(x, 2, full), ref_sum(x, 2), 1e-5, 1e-5, full.str());
      }
    }
  }
  EXPECT_EQ(softmax_f32_cpu_descriptor().name, "softmax_online_f32");
  EXPECT_EQ(layer_norm_f32_cpu_descriptor().name, "layer_norm_welford_f32");
  EXPECT_EQ(sum_f32_cpu_descriptor().name, "sum_f32");
  // The kernels refuse a bad config as a value.
  SumArgs args;
  const at::Tensor out = at::empty({9, 1});
  args.out = view_of(out);
  args.in = view_of(x);
  args.reduce_mask = 2;
  EXPECT_FALSE(sum_f32_cpu(args, config(1, 0)).is_ok());
  // Bad arguments throw: a mask past the dims, an out that does not keep the reduced dims.
  args.reduce_mask = 4;
  EXPECT_THROW((void)sum_f32_cpu(args, config(1, 1)), ValueError);
  args.reduce_mask = 1;
  EXPECT_THROW((void)sum_f32_cpu(args, config(1, 1)), ValueError);
}

// Outputs beyond the last-level cache: layer_norm streams and prefetches into L2; softmax,
// bound by its arithmetic on one core, streams (prefetching into L2) only on two or more
// threads with AVX-512 (Note [Row prefetch]). A prefetch target past L2 is refused.
TEST(ReductionCpu, DefaultStreamAndPrefetch) {
  const std::int64_t l3 = cpu_fingerprint().l3_bytes;
  const std::int64_t rows = std::max<std::int64_t>(l3, std::int64_t{32} << 20) / 4096 / 4 * 2;
  const TensorSpec big{DType::kFloat32, {rows, 4096}, true};
  const ShapeKey sm_key("aten::_softmax", {big});
  const ShapeKey ln_key("aten::layer_norm", {big});
  for (const int limit : {1, 2}) {
    set_cpu_thread_limit(limit);
    const bool two = cpu_thread_limit() == 2;
    for (const std::string& isa : test::runnable_isas()) {
      const test::IsaGuard guard(isa);
      const std::string what = isa + ", thread limit " + std::to_string(limit);
      const LaunchConfig ln = layer_norm_f32_cpu_descriptor().default_config(ln_key);
      EXPECT_EQ(ln.get_or("stream", -1), 1) << what;
      EXPECT_EQ(ln.get_or("prefetch", -1), 2) << what;
      const LaunchConfig sm = softmax_f32_cpu_descriptor().default_config(sm_key);
      const bool streams = two && isa == "avx512";
      EXPECT_EQ(sm.get_or("stream", -1), streams ? 1 : 0) << what;
      EXPECT_EQ(sm.get_or("prefetch", -1), streams ? 2 : 1) << what;
      LaunchConfig bad = sm;
      bad.set("prefetch", 3);
      EXPECT_FALSE(softmax_f32_cpu_descriptor().can_run(sm_key, bad).is_ok()) << what;
    }
  }
  set_cpu_thread_limit(0);
}

TEST(ReductionCpu, WarmCallsAllocateNothing) {
  const at::Tensor x = at::randn({64, 300});
  const at::Tensor mask = at::randn({300});
  at::Tensor out = at::empty({64, 300});
  at::Tensor sums = at::empty({64, 1});
  SoftmaxArgs sm;
  sm.out = view_of(out);
  sm.inputs[0] = view_of(x);
  sm.inputs[1] = broadcast_view(view_of(mask), sm.out.sizes.data(), 2);
  sm.prologue = scale_mask(0.5F);
  sm.dim = 1;
  LayerNormArgs ln;
  ln.out = view_of(out);
  ln.inputs[0] = view_of(x);
  ln.prologue = identity();
  SumArgs su;
  su.out = view_of(sums);
  su.in = view_of(x);
  su.reduce_mask = 2;
  // A sum split over blocks (one output, Note [Split sums]): its partials live in the launch.
  const at::Tensor long_row = at::randn({262144});
  at::Tensor total = at::empty({1});
  SumArgs split;
  split.out = view_of(total);
  split.in = view_of(long_row);
  split.reduce_mask = 1;
  const LaunchConfig cfg = config(4, 2);
  const auto all = [&] {
    return softmax_f32_cpu(sm, cfg).is_ok() && layer_norm_f32_cpu(ln, cfg).is_ok() &&
           sum_f32_cpu(su, cfg).is_ok() && sum_f32_cpu(split, cfg).is_ok();
  };
  test::on_each_pool_thread(2, [&] { ASSERT_TRUE(all()); });
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(all());
  const long before = ka_test_allocation_count();
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(all());
  EXPECT_EQ(ka_test_allocation_count() - before, 0);
}

}  // namespace
}  // namespace ka::kernels
