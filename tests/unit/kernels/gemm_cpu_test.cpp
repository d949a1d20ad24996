// The CPU GEMM against libtorch's at::addmm (the oracle), on odd shapes, tile boundaries,
// strided inputs, every bias broadcast, alpha/beta paths, thread counts and every ISA path
// this CPU can run.
#include <ka/core/error.hpp>
#include <ka/core/fingerprint.hpp>
#include <ka/kernels/gemm.hpp>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "isa_paths.hpp"
#include "torch_view.hpp"

namespace ka::kernels {
namespace {

using test::view_of;

LaunchConfig config(std::int64_t tm, std::int64_t tn, std::int64_t tk, std::int64_t threads,
                    std::int64_t skinny = 0, std::int64_t split_k = 1) {
  LaunchConfig c;
  c.set("tile_m", tm).set("tile_n", tn).set("tile_k", tk).set("threads", threads);
  c.set("skinny", skinny).set("split_k", split_k).set("micro_n", 0).set("block_m", 0);
  return c;
}

// Arguments of an mm into `out` (no bias).
AddmmArgs mm_args(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  AddmmArgs args;
  args.out = view_of(out);
  args.mat1 = view_of(a);
  args.mat2 = view_of(b);
  return args;
}

using test::IsaGuard;
using test::runnable_isas;

// Runs ka and at::addmm on the same inputs and compares: |ka - ref| <= atol + rtol*|ref|.
void expect_matches(const at::Tensor& bias, const at::Tensor& a, const at::Tensor& b, float beta,
                    float alpha, const LaunchConfig& cfg, const std::string& what) {
  const std::int64_t m = a.size(0);
  const std::int64_t n = b.size(1);
  at::Tensor out = at::full({m, n}, std::nanf(""), at::kFloat);
  AddmmArgs args = mm_args(out, a, b);
  if (bias.defined()) args.self = view_of(bias);
  args.beta = beta;
  args.alpha = alpha;
  const Status st = gemm_f32_cpu(args, cfg);
  ASSERT_TRUE(st.is_ok()) << what << ": " << st.reason();
  const at::Tensor ref = bias.defined() ? at::addmm(bias, a, b, beta, alpha) : at::mm(a, b) * alpha;
  ASSERT_EQ(ref.sizes(), out.sizes());
  if (out.numel() == 0) return;
  const double atol = 1e-5 * std::sqrt(static_cast<double>(std::max<std::int64_t>(a.size(1), 1)));
  const bool close = at::allclose(out, ref, 1e-4, atol);
  ASSERT_TRUE(close) << what << ": max abs error " << (out - ref).abs().max().item<float>()
                     << " (first NaN means an unwritten element: "
                     << out.isnan().any().item<bool>() << ")";
}

struct Shape {
  std::int64_t m, k, n;
};

TEST(GemmCpu, OddShapesEveryIsaSeveralConfigs) {
  at::manual_seed(1);
  // Tile boundaries: the micro-tile is 6 rows x 16/32 columns; tiles 6..192 x 32..512.
  const std::vector<Shape> shapes = {{1, 1, 1},    {37, 53, 71},  {6, 16, 32},  {7, 17, 33},
                                     {5, 3, 31},   {12, 64, 64},  {13, 65, 65}, {48, 256, 96},
                                     {49, 257, 97}, {97, 300, 129}, {1, 200, 300}, {200, 7, 1},
                                     {64, 1, 64}};
  const std::vector<LaunchConfig> configs = {config(6, 32, 64, 1), config(12, 64, 128, 2),
                                             config(96, 256, 256, 2), config(48, 32, 512, 4)};
  for (const std::string& isa : runnable_isas()) {
    IsaGuard guard(isa);
    ASSERT_EQ(gemm_cpu_isa(), isa);
    for (const Shape& s : shapes) {
      const at::Tensor a = at::rand({s.m, s.k}) * 2 - 1;
      const at::Tensor b = at::rand({s.k, s.n}) * 2 - 1;
      const at::Tensor bias = at::rand({s.n}) * 2 - 1;
      for (const LaunchConfig& cfg : configs) {
        const std::string what = isa + " " + std::to_string(s.m) + "x" + std::to_string(s.k) +
                                 "x" + std::to_string(s.n) + " " + cfg.str();
        expect_matches(bias, a, b, 1.0F, 1.0F, cfg, what + " addmm");
        expect_matches(at::Tensor(), a, b, 0.0F, 1.0F, cfg, what + " mm");
        // nn.Linear's B (Note [Packing a transposed B]) and a B with no unit stride.
        expect_matches(bias, a, b.t().contiguous().t(), 1.0F, 1.0F, cfg, what + " B transposed");
        const at::Tensor spaced = at::rand({2 * s.k, 2 * s.n}).slice(0, 0, 2 * s.k, 2)
                                      .slice(1, 0, 2 * s.n, 2);
        expect_matches(bias, a, spaced, 1.0F, 1.0F, cfg, what + " B strided");
      }
    }
  }
}

// The tunables micro_n (micro-tile width) and block_m (MC): every width each ISA has, A
// blocks that cut tasks into several (and a last short one), against libtorch; a width the
// ISA lacks is refused with the reason, not run.
TEST(GemmCpu, EveryMicroTileWidthAndABlockHeight) {
  at::manual_seed(11);
  const std::vector<Shape> shapes = {{37, 53, 71}, {97, 300, 129}, {200, 7, 1}, {13, 65, 100},
                                     {150, 129, 47}};
  for (const std::string& isa : runnable_isas()) {
    IsaGuard guard(isa);
    const std::vector<std::int64_t> widths = gemm_cpu_micro_widths();
    ASSERT_FALSE(widths.empty()) << isa;
    for (const std::int64_t width : {0, 16, 32, 48}) {
      const bool has =
          width == 0 || std::find(widths.begin(), widths.end(), width) != widths.end();
      for (const std::int64_t block_m : {0, 48, 96}) {
        for (const Shape& s : shapes) {
          const at::Tensor a = at::rand({s.m, s.k}) * 2 - 1;
          const at::Tensor b = at::rand({s.k, s.n}) * 2 - 1;
          const at::Tensor bias = at::rand({s.n}) * 2 - 1;
          LaunchConfig cfg = config(192, 64, 64, 2);
          cfg.set("micro_n", width).set("block_m", block_m);
          const std::string what = isa + " " + std::to_string(s.m) + "x" + std::to_string(s.k) +
                                   "x" + std::to_string(s.n) + " " + cfg.str();
          if (!has) {
            at::Tensor out = at::empty({s.m, s.n});
            const Status st = gemm_f32_cpu(mm_args(out, a, b), cfg);
            ASSERT_FALSE(st.is_ok()) << what;
            EXPECT_NE(st.reason().find("no micro-kernel that wide"), std::string::npos)
                << st.reason();
            continue;
          }
          expect_matches(bias, a, b, 0.5F, 1.5F, cfg, what);
          // Column-major B takes the generic packing of every width.
          expect_matches(bias, a, b.t().contiguous().t(), 1.0F, 1.0F, cfg, what + " B col-major");
        }
      }
    }
  }
}

// Edge tiles (Note [Edge micro-tiles]): a last A sliver of every row count and B slivers that
// end inside each of their vectors, at every micro-tile width, written into the corner of a
// larger buffer whose other elements must keep their values. They hold -0.0: a store past the
// edge of C + 0 (packed B is zero there) would leave +0.0, so even that shows.
TEST(GemmCpu, EdgeTilesWriteOnlyTheirRowsAndColumns) {
  at::manual_seed(12);
  constexpr std::int64_t kPad = 24;
  for (const std::string& isa : runnable_isas()) {
    IsaGuard guard(isa);
    for (const std::int64_t width : gemm_cpu_micro_widths()) {
      for (const std::int64_t m : {1, 2, 3, 4, 5, 7, 11, 128}) {
        for (const std::int64_t n : {1L, 9L, 17L, 31L, width - 1, width + 5}) {
          const at::Tensor a = at::rand({m, 37}) * 2 - 1;
          const at::Tensor b = at::rand({37, n}) * 2 - 1;
          const at::Tensor bias = at::rand({n}) * 2 - 1;
          at::Tensor big = at::full({m + kPad, n + kPad}, -0.0F, at::kFloat);
          at::Tensor out = big.narrow(0, 0, m).narrow(1, 0, n);
          AddmmArgs args = mm_args(out, a, b);
          args.self = view_of(bias);
          args.beta = 0.5F;
          args.alpha = 1.5F;
          LaunchConfig cfg = config(192, 96, 64, 1);
          cfg.set("micro_n", width);
          const std::string what = isa + " micro_n " + std::to_string(width) + " " +
                                   std::to_string(m) + "x37x" + std::to_string(n);
          const Status st = gemm_f32_cpu(args, cfg);
          ASSERT_TRUE(st.is_ok()) << what << ": " << st.reason();
          const at::Tensor ref = at::addmm(bias, a, b, 0.5, 1.5);
          EXPECT_TRUE(at::allclose(out, ref, 1e-4, 1e-4))
              << what << ": max abs error " << (out - ref).abs().max().item<float>();
          for (const at::Tensor& pad : {big.narrow(1, n, kPad), big.narrow(0, m, kPad)}) {
            EXPECT_TRUE((pad.eq(0) & pad.signbit()).all().item<bool>())
                << what << ": wrote past the output's rows or columns";
          }
        }
      }
    }
  }
}

TEST(GemmCpu, ZeroSizeDimensions) {
  const LaunchConfig cfg = config(12, 32, 64, 2);
  for (const Shape& s : std::vector<Shape>{{0, 5, 7}, {5, 0, 7}, {5, 7, 0}, {0, 0, 0}}) {
    const at::Tensor a = at::rand({s.m, s.k});
    const at::Tensor b = at::rand({s.k, s.n});
    const at::Tensor bias = at::rand({s.n});
    // K == 0: out = beta * bias exactly.
    expect_matches(bias, a, b, 2.0F, 3.0F, cfg, "zero-size " + std::to_string(s.m) + "x" +
                                                     std::to_string(s.k) + "x" + std::to_string(s.n));
  }
}

TEST(GemmCpu, AlphaBetaPaths) {
  at::manual_seed(2);
  const at::Tensor a = at::rand({23, 41}) - 0.5;
  const at::Tensor b = at::rand({41, 19}) - 0.5;
  const at::Tensor bias = at::rand({23, 19}) - 0.5;
  const LaunchConfig cfg = config(12, 32, 16, 2);
  for (const float beta : {0.0F, 1.0F, 0.5F, -2.0F}) {
    for (const float alpha : {1.0F, 0.0F, 2.5F, -1.0F}) {
      expect_matches(bias, a, b, beta, alpha, cfg,
                     "beta=" + std::to_string(beta) + " alpha=" + std::to_string(alpha));
    }
  }
}

TEST(GemmCpu, BetaZeroIgnoresNanInSelf) {
  const at::Tensor a = at::rand({9, 10});
  const at::Tensor b = at::rand({10, 11});
  const at::Tensor bias = at::full({9, 11}, std::nanf(""));
  at::Tensor out = at::empty({9, 11});
  AddmmArgs args = mm_args(out, a, b);
  args.self = view_of(bias);
  args.beta = 0.0F;
  ASSERT_TRUE(gemm_f32_cpu(args, config(6, 32, 64, 1)).is_ok());
  EXPECT_FALSE(out.isnan().any().item<bool>());
  EXPECT_TRUE(at::allclose(out, at::mm(a, b), 1e-5, 1e-5));
}

TEST(GemmCpu, EveryBiasBroadcast) {
  at::manual_seed(3);
  const std::int64_t m = 14;
  const std::int64_t n = 35;
  const at::Tensor a = at::rand({m, 20});
  const at::Tensor b = at::rand({20, n});
  const LaunchConfig cfg = config(6, 32, 8, 2);
  for (const auto& sizes : std::vector<std::vector<std::int64_t>>{
           {}, {1}, {n}, {1, n}, {m, 1}, {1, 1}, {m, n}}) {
    const at::Tensor bias = at::rand(sizes);
    expect_matches(bias, a, b, 0.75F, 1.25F, cfg, "bias dims " + std::to_string(sizes.size()));
  }
}

TEST(GemmCpu, StridedAndTransposedInputs) {
  at::manual_seed(4);
  const LaunchConfig cfg = config(12, 64, 32, 2);
  // linear() calls addmm with mat2 = weight.t(): a column-major view.
  const at::Tensor weight = at::rand({45, 31});
  const at::Tensor x = at::rand({29, 31});
  expect_matches(at::rand({45}), x, weight.t(), 1.0F, 1.0F, cfg, "mat2 transposed");
  expect_matches(at::rand({45}), at::rand({31, 29}).t(), weight.t(), 1.0F, 1.0F, cfg,
                 "both transposed");
  // Every other column of a wider matrix; a bias that is a strided slice.
  const at::Tensor wide = at::rand({29, 62});
  const at::Tensor bias_wide = at::rand({90});
  expect_matches(bias_wide.slice(0, 0, 90, 2), wide.slice(1, 0, 62, 2), weight.t(), 1.0F, 1.0F,
                 cfg, "sliced mat1 and bias");
}

// A mat2 packed ahead (Note [Constant weights packed once]) gives the very floats packing on
// every call gives (same panels, same order of sums): every width of every ISA, K blocks
// with a short last one, edge slivers, row-major and transposed B, several column tasks.
// A layout that is not the config's is ignored, and a config that packs no B (skinny) has no
// layout.
TEST(GemmCpu, PackedMat2GivesTheSameResult) {
  at::manual_seed(12);
  const std::vector<Shape> shapes = {{37, 53, 71}, {128, 300, 200}, {9, 17, 1}, {64, 96, 97}};
  for (const std::string& isa : runnable_isas()) {
    IsaGuard guard(isa);
    for (const std::int64_t width : gemm_cpu_micro_widths()) {
      for (const Shape& s : shapes) {
        for (const bool transposed : {false, true}) {
          const at::Tensor a = at::rand({s.m, s.k}) * 2 - 1;
          const at::Tensor b = transposed ? (at::rand({s.n, s.k}) * 2 - 1).t()
                                          : at::rand({s.k, s.n}) * 2 - 1;
          const at::Tensor bias = at::rand({s.n});
          LaunchConfig cfg = config(48, width * 2, 64, 2);
          cfg.set("micro_n", width);
          const std::string what = isa + " " + std::to_string(s.m) + "x" + std::to_string(s.k) +
                                   "x" + std::to_string(s.n) + (transposed ? " B^T " : " ") +
                                   cfg.str();
          at::Tensor plain = at::empty({s.m, s.n});
          AddmmArgs args = mm_args(plain, a, b);
          args.self = view_of(bias);
          ASSERT_TRUE(gemm_f32_cpu(args, cfg).is_ok()) << what;
          const std::optional<PackedMat2Layout> layout = gemm_f32_cpu_mat2_layout(args, cfg);
          ASSERT_TRUE(layout.has_value()) << what;
          EXPECT_EQ(layout->cols, width) << what;
          std::vector<float> packed(static_cast<std::size_t>(layout->floats()), std::nanf(""));
          pack_gemm_f32_cpu_mat2(args, *layout, packed.data());
          at::Tensor from_packed = at::empty({s.m, s.n});
          args.out = view_of(from_packed);
          args.mat2_packed = {packed.data(), *layout};
          ASSERT_TRUE(gemm_f32_cpu(args, cfg).is_ok()) << what;
          EXPECT_TRUE(at::equal(plain, from_packed)) << what;
          expect_matches(bias, a, b, 1.0F, 1.0F, cfg, what);
          // Packed in another layout (deeper K blocks): ignored, so still right.
          PackedMat2Layout other = *layout;
          other.tile_k = layout->tile_k + 8;
          std::vector<float> wrong(static_cast<std::size_t>(other.floats()), 1e30F);
          args.mat2_packed = {wrong.data(), other};
          at::Tensor ignored = at::empty({s.m, s.n});
          args.out = view_of(ignored);
          ASSERT_TRUE(gemm_f32_cpu(args, cfg).is_ok()) << what;
          EXPECT_TRUE(at::equal(plain, ignored)) << what << " (a foreign layout was read)";
        }
      }
    }
    at::Tensor out = at::empty({4, 64});
    AddmmArgs skinny = mm_args(out, at::rand({4, 32}), at::rand({32, 64}));
    EXPECT_FALSE(gemm_f32_cpu_mat2_layout(skinny, config(0, 64, 256, 1, 1)).has_value()) << isa;
  }
}

// A task whose partial sums outgrow the staging buffer (16 MiB) runs in bands of rows, each
// through every K block (Note [Staged bands of rows]): 600 x 8192 with two K blocks runs as two
// bands, with and without a bias, on every ISA.
TEST(GemmCpu, TasksTallerThanTheStageRunInBands) {
  at::manual_seed(17);
  const at::Tensor a = at::rand({600, 128}) * 2 - 1;
  const at::Tensor b = at::rand({128, 8192}) * 2 - 1;
  const at::Tensor bias = at::rand({8192}) * 2 - 1;
  for (const std::string& isa : runnable_isas()) {
    IsaGuard guard(isa);
    const LaunchConfig cfg = config(600, 8192, 64, 1);
    expect_matches(bias, a, b, 1.0F, 1.0F, cfg, isa + " addmm " + cfg.str());
    expect_matches(at::Tensor(), a, b, 0.0F, 1.0F, cfg, isa + " mm " + cfg.str());
  }
}

TEST(GemmCpu, ThreadCountsAgree) {
  at::manual_seed(5);
  const at::Tensor a = at::rand({131, 77});
  const at::Tensor b = at::rand({77, 149});
  const at::Tensor bias = at::rand({149});
  for (const std::int64_t threads : {1, 2, 3, 8}) {
    expect_matches(bias, a, b, 1.0F, 1.0F, config(12, 32, 64, threads),
                   "threads=" + std::to_string(threads));
  }
}

TEST(GemmCpu, DefaultConfigIsCorrectOnModelShapes) {
  at::manual_seed(6);
  const auto& d = gemm_f32_cpu_descriptor();
  for (const Shape& s : std::vector<Shape>{{1, 512, 1024}, {16, 256, 512}, {128, 128, 128}, {77, 768, 96}}) {
    const at::Tensor a = at::rand({s.m, s.k}) - 0.5;
    const at::Tensor b = at::rand({s.k, s.n}) - 0.5;
    const at::Tensor bias = at::rand({s.n});
    const LaunchConfig cfg = d.default_config(addmm_shape_key(s.m, s.k, s.n));
    expect_matches(bias, a, b, 1.0F, 1.0F, cfg, "default " + cfg.str());
  }
}

TEST(GemmCpu, BadInputIsAClearError) {
  const at::Tensor a = at::rand({4, 5});
  const at::Tensor b = at::rand({6, 7});
  at::Tensor out = at::empty({4, 7});
  AddmmArgs args = mm_args(out, a, b);
  try {
    (void)gemm_f32_cpu(args, config(6, 32, 64, 1));
    FAIL() << "mismatched inner dimensions were accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be multiplied (4x5 and 6x7)"), std::string::npos)
        << e.what();
  }
  const at::Tensor b_ok = at::rand({5, 7});
  args.mat2 = view_of(b_ok);
  const at::Tensor bias = at::rand({3});
  args.self = view_of(bias);
  EXPECT_THROW((void)gemm_f32_cpu(args, config(6, 32, 64, 1)), ValueError);  // [3] vs [4, 7]
  args.self = TensorView();
  args.mat1.dtype = DType::kFloat64;
  EXPECT_THROW((void)gemm_f32_cpu(args, config(6, 32, 64, 1)), ValueError);
  args.mat1.dtype = DType::kFloat32;
  args.mat1.device = Device::cuda(0);
  EXPECT_THROW((void)gemm_f32_cpu(args, config(6, 32, 64, 1)), ValueError);
}

TEST(GemmCpu, InvalidConfigIsAStatusNotACrash) {
  const at::Tensor a = at::rand({4, 5});
  const at::Tensor b = at::rand({5, 7});
  at::Tensor out = at::empty({4, 7});
  AddmmArgs args = mm_args(out, a, b);
  const Status not_multiple = gemm_f32_cpu(args, config(7, 32, 64, 1));
  EXPECT_FALSE(not_multiple.is_ok());
  EXPECT_NE(not_multiple.reason().find("tile_m % 6"), std::string::npos) << not_multiple.reason();
  LaunchConfig missing;
  missing.set("tile_m", 6);
  EXPECT_FALSE(gemm_f32_cpu(args, missing).is_ok());
  EXPECT_FALSE(gemm_f32_cpu(args, config(6, 32, 64, 1, 2)).is_ok());  // skinny is 0 or 1
  LaunchConfig wrong_grid = config(6, 32, 64, 1);
  wrong_grid.grid = {5, 5, 1};
  wrong_grid.block = {32, 6, 1};
  EXPECT_FALSE(gemm_f32_cpu(args, wrong_grid).is_ok());
}

TEST(GemmCpu, SkinnyPathMatchesLibtorch) {
  at::manual_seed(8);
  // Rows 1..16 cover every strip width and row grouping (AVX-512: 64 columns up to 4 rows, then
  // groups of up to 8 over 48; AVX2: 32 columns up to 2 rows, then groups of up to 6 over 16)
  // and odd row counts; N covers strip and task tails (masked vectors); K covers tails of the
  // 8-, 16- and 32-row passes (the next pass's prefetch stops before the end).
  const std::vector<Shape> shapes = {{1, 1, 1},    {1, 300, 70},  {2, 513, 129},  {3, 40, 45},
                                     {4, 9, 200},  {5, 64, 64},   {6, 7, 1000},   {7, 260, 33},
                                     {8, 33, 95},  {9, 17, 47},   {12, 20, 17},   {13, 1000, 96},
                                     {16, 257, 300}};
  for (const std::string& isa : runnable_isas()) {
    IsaGuard guard(isa);
    for (const Shape& s : shapes) {
      const at::Tensor a = at::rand({s.m, s.k}) - 0.5;
      const at::Tensor b = at::rand({s.k, s.n}) - 0.5;
      const at::Tensor bias = at::rand({s.n});
      for (const LaunchConfig& cfg :
           {config(6, 64, 256, 2, 1), config(6, 32, 64, 1, 1), config(6, 512, 128, 4, 1)}) {
        const std::string what = isa + " skinny " + std::to_string(s.m) + "x" +
                                 std::to_string(s.k) + "x" + std::to_string(s.n) + " " + cfg.str();
        expect_matches(bias, a, b, 0.5F, 1.5F, cfg, what);
        expect_matches(at::Tensor(), a, b, 0.0F, 1.0F, cfg, what + " mm");
        // A may have any strides: a transposed view.
        expect_matches(bias, a.t().contiguous().t(), b, 1.0F, 1.0F, cfg, what + " A column-major");
        // B transposed (nn.Linear's weight): the dot-product path, also with A strided.
        const at::Tensor bt = b.t().contiguous().t();
        expect_matches(bias, a, bt, 0.5F, 1.5F, cfg, what + " B transposed");
        expect_matches(at::Tensor(), a.t().contiguous().t(), bt, 1.0F, 1.0F, cfg,
                       what + " A and B column-major");
      }
    }
  }
}

TEST(GemmCpu, SplitKMatchesLibtorchOnEveryThreadCount) {
  at::manual_seed(9);
  // Narrow N with a long K (one column task), K not a multiple of the parts, parts that
  // exceed the threads (blocks queue on one thread), a part with no K at all (K < parts),
  // bias and scales (block 0 adds beta * bias; the others' partials arrive in the finish).
  for (const std::string& isa : runnable_isas()) {
    IsaGuard guard(isa);
    for (const Shape& s :
         std::vector<Shape>{{1, 5000, 64}, {2, 3001, 40}, {16, 999, 4}, {3, 3, 7}, {1, 1, 1}}) {
      const at::Tensor a = at::rand({s.m, s.k}) - 0.5;
      const at::Tensor b = at::rand({s.k, s.n}) - 0.5;
      const at::Tensor bias = at::rand({s.n});
      for (const std::int64_t parts : {2, 4, 8}) {
        if (s.m * s.n * (parts - 1) > 128) continue;
        for (const int threads : {1, 2, 4}) {
          const LaunchConfig cfg = config(18, 64, 256, threads, 1, parts);
          const std::string what = isa + " split_k " + std::to_string(s.m) + "x" +
                                   std::to_string(s.k) + "x" + std::to_string(s.n) + " " +
                                   cfg.str();
          expect_matches(bias, a, b, 0.5F, 1.5F, cfg, what);
          expect_matches(at::Tensor(), a, b, 0.0F, 1.0F, cfg, what + " mm");
          expect_matches(bias, a, b.t().contiguous().t(), 0.5F, 1.5F, cfg, what + " B transposed");
        }
      }
    }
  }
}

TEST(GemmCpu, SplitKRefusesWhatItCannotHold) {
  const at::Tensor a = at::rand({4, 300});
  const at::Tensor b = at::rand({300, 64});
  at::Tensor out = at::empty({4, 64});
  AddmmArgs args = mm_args(out, a, b);
  // 4 x 64 x (2 - 1) = 256 partial floats: more than the launch's scratch.
  Status st = gemm_f32_cpu(args, config(6, 64, 256, 2, 1, 2));
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.reason().find("exceed the launch's scratch"), std::string::npos) << st.reason();
  // Two column tasks: split columns, not K.
  st = gemm_f32_cpu(args, config(6, 32, 256, 2, 1, 2));
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.reason().find("one column task"), std::string::npos) << st.reason();
  // Only the skinny path splits K.
  st = gemm_f32_cpu(args, config(6, 64, 256, 2, 0, 2));
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.reason().find("split_k == 1 unless skinny == 1"), std::string::npos)
      << st.reason();
}

TEST(GemmCpu, SkinnyPathRefusesMoreThanSixteenRows) {
  const at::Tensor a = at::rand({17, 40});
  const at::Tensor b = at::rand({40, 50});
  at::Tensor out = at::empty({17, 50});
  AddmmArgs args = mm_args(out, a, b);
  const Status st = gemm_f32_cpu(args, config(18, 64, 64, 1, 1));
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.reason().find("M <= 16"), std::string::npos) << st.reason();
}

TEST(GemmCpu, SkinnyPathRefusesBWithoutAUnitStride) {
  const at::Tensor a = at::rand({3, 40});
  const at::Tensor b = at::rand({80, 100}).slice(0, 0, 80, 2).slice(1, 0, 100, 2);  // [40, 50]
  at::Tensor out = at::empty({3, 50});
  AddmmArgs args = mm_args(out, a, b);
  const Status st = gemm_f32_cpu(args, config(6, 64, 64, 1, 1));
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.reason().find("unit column stride"), std::string::npos) << st.reason();
  EXPECT_TRUE(gemm_f32_cpu(args, config(6, 64, 64, 1, 0)).is_ok());  // the packed path takes it
}

// Every ISA path has the skinny (decode) path, and the default heuristic takes it for a
// decode shape on each.
TEST(GemmCpu, SkinnyPathOnEveryIsa) {
  for (const std::string& isa : runnable_isas()) {
    IsaGuard guard(isa);
    const auto cfg =
        gemm_f32_cpu_descriptor().default_config(addmm_shape_key(1, 4096, 4096, false));
    EXPECT_EQ(cfg.get_or("skinny", -1), 1) << isa << ": " << cfg.str();
    const at::Tensor a = at::rand({3, 40});
    const at::Tensor b = at::rand({40, 50});
    at::Tensor out = at::empty({3, 50});
    EXPECT_TRUE(gemm_f32_cpu(mm_args(out, a, b), config(6, 64, 64, 1, 1)).is_ok()) << isa;
  }
}

TEST(GemmCpu, ForcingAnUnknownIsaIsRejected) {
  EXPECT_THROW(force_cpu_isa("sve"), ValueError);
}

}  // namespace
}  // namespace ka::kernels
