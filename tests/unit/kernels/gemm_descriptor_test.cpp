// The GEMM descriptors as data: tunable spaces, constraints, default heuristics, cost model.
#include <ka/core/cpu_cores.hpp>
#include <ka/core/error.hpp>
#include <ka/kernels/cpu_launch.hpp>
#include <ka/kernels/gemm.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace ka::kernels {
namespace {

TEST(GemmDescriptor, CpuSpaceEnumeratesOnlyValidPoints) {
  const auto& d = gemm_f32_cpu_descriptor();
  EXPECT_EQ(d.name, "gemm_f32_blocked");
  EXPECT_GE(d.version, 1);
  EXPECT_EQ(d.device, DeviceType::kCPU);
  const auto points = d.space.enumerate();
  ASSERT_FALSE(points.empty());
  EXPECT_LE(points.size(), d.space.cross_product_size());
  std::set<std::string> unique;
  for (const auto& p : points) {
    EXPECT_TRUE(d.space.check(p).is_ok()) << p.str();
    unique.insert(p.str());
  }
  EXPECT_EQ(unique.size(), points.size());
  // Independent count over the raw candidates: every multiple-of-6 tile_m, multiple-of-32
  // tile_n, and packed B panels (tile_k x tile_n floats) of at most 2 MiB; split_k above 1
  // only with skinny; block_m 0 or a multiple of 6 no taller than tile_m; the skinny path
  // with micro_n and block_m 0 only.
  std::size_t expected = 0;
  const auto& params = d.space.params();
  ASSERT_EQ(params.size(), 8U);
  ASSERT_EQ(params[4].name, "skinny");
  ASSERT_EQ(params[5].name, "split_k");
  ASSERT_EQ(params[6].name, "micro_n");
  ASSERT_EQ(params[7].name, "block_m");
  for (const auto tm : params[0].candidates) {
    for (const auto tn : params[1].candidates) {
      for (const auto tk : params[2].candidates) {
        if (tm % 6 != 0 || tn % 32 != 0 || tn * tk * 4 > (2 << 20)) continue;
        for (const auto skinny : params[4].candidates) {
          for (const auto split : params[5].candidates) {
            for (const auto micro : params[6].candidates) {
              for (const auto bm : params[7].candidates) {
                const bool ok = (split == 1 || skinny == 1) &&
                                (bm == 0 || (bm % 6 == 0 && bm <= tm)) &&
                                (skinny == 0 || (micro == 0 && bm == 0));
                expected += ok ? params[3].candidates.size() : 0;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(points.size(), expected);
}

TEST(GemmDescriptor, ConstraintViolationsAreNamed) {
  const auto& d = gemm_f32_cpu_descriptor();
  LaunchConfig p;
  p.set("tile_m", 10).set("tile_n", 64).set("tile_k", 64).set("threads", 1).set("skinny", 0);
  p.set("split_k", 1).set("micro_n", 0).set("block_m", 0);
  const Status st = d.space.check(p);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.reason().find("tile_m % 6 == 0"), std::string::npos) << st.reason();
  LaunchConfig missing;
  missing.set("tile_m", 6);
  EXPECT_NE(d.space.check(missing).reason().find("missing tunable"), std::string::npos);
}

TEST(GemmDescriptor, DefaultsPlanForTheThreadLimit) {
  const auto& d = gemm_f32_cpu_descriptor();
  const ShapeKey key = addmm_shape_key(1024, 1024, 1024);
  const int hw = usable_cores();
  set_cpu_thread_limit(1);
  EXPECT_EQ(cpu_thread_limit(), 1);
  const LaunchConfig one = d.default_config(key);
  EXPECT_EQ(one.get_or("threads", 0), 1);
  // One thread: one task as wide as N and as tall as M (each operand packed once).
  EXPECT_EQ(one.get_or("tile_n", 0), 1024);
  EXPECT_EQ(one.get_or("tile_m", 0), 1026);
  set_cpu_thread_limit(1000);
  EXPECT_EQ(cpu_thread_limit(), hw) << "capped at the logical cores";
  const LaunchConfig all = d.default_config(key);
  EXPECT_EQ(all.get_or("threads", 0), std::min(hw, static_cast<int>(all.grid.x * all.grid.y)));
  set_cpu_thread_limit(0);
}

TEST(GemmDescriptor, DefaultConfigIsValidAndComplete) {
  const auto& d = gemm_f32_cpu_descriptor();
  for (const auto& [m, k, n] : std::vector<std::array<std::int64_t, 3>>{
           {1, 4096, 11008}, {16, 4096, 4096}, {512, 768, 3072}, {2048, 2048, 2048}, {1, 1, 1},
           {0, 3, 3}}) {
    const ShapeKey key = addmm_shape_key(m, k, n);
    const LaunchConfig c = d.default_config(key);
    EXPECT_TRUE(d.can_run(key, c).is_ok()) << key.str() << " " << c.str();
    EXPECT_EQ(c.block.x, c.get_or("tile_n", -1));
    EXPECT_EQ(c.block.y, c.get_or("tile_m", -1));
    EXPECT_EQ(c.grid.x * c.block.x >= n, true);
    EXPECT_EQ(c.grid.y * c.block.y >= m, true);
    EXPECT_EQ(LaunchConfig::parse(c.str()), c);
  }
}

TEST(GemmDescriptor, DefaultSplitsKOnlyWhereColumnsCannotFeedTheThreads) {
  const auto& d = gemm_f32_cpu_descriptor();
  const int hw = cpu_thread_limit();
  const ShapeKey key = addmm_shape_key(1, 65536, 64, false);  // 16 MiB of B, one column task
  const LaunchConfig narrow = d.default_config(key);
  // 1 x 64 partial floats per extra part: two parts fit the launch's 128 floats, four do not.
  EXPECT_EQ(narrow.get_or("split_k", -1), hw >= 2 ? 2 : 1) << narrow.str();
  EXPECT_TRUE(d.can_run(key, narrow).is_ok()) << narrow.str();
  // Wide N splits columns; 4 MiB of B is not worth a second thread; M > 16 is not skinny.
  EXPECT_EQ(d.default_config(addmm_shape_key(1, 4096, 4096, false)).get_or("split_k", -1), 1);
  EXPECT_EQ(d.default_config(addmm_shape_key(1, 16384, 64, false)).get_or("split_k", -1), 1);
  EXPECT_EQ(d.default_config(addmm_shape_key(64, 65536, 64, false)).get_or("split_k", -1), 1);
}

TEST(GemmDescriptor, DefaultPicksSkinnyForDecodeShapesOnly) {
  const auto& d = gemm_f32_cpu_descriptor();
  EXPECT_EQ(d.default_config(addmm_shape_key(1, 4096, 11008, false)).get_or("skinny", -1), 1);
  EXPECT_EQ(d.default_config(addmm_shape_key(16, 4096, 4096, false)).get_or("skinny", -1), 1);
  EXPECT_EQ(d.default_config(addmm_shape_key(17, 4096, 4096, false)).get_or("skinny", -1), 0);
  EXPECT_EQ(d.default_config(addmm_shape_key(512, 768, 768)).get_or("skinny", -1), 0);
  // A transposed weight (linear's mat2 = weight.t()) streams through the dot-product path; any
  // other strided mat2 is packed.
  const ShapeKey transposed("aten::mm", {{DType::kFloat32, {1, 4096}, true},
                                         {DType::kFloat32, {4096, 4096}, false, true}});
  EXPECT_EQ(d.default_config(transposed).get_or("skinny", -1), 1);
  const ShapeKey strided("aten::mm", {{DType::kFloat32, {1, 4096}, true},
                                      {DType::kFloat32, {4096, 4096}, false}});
  EXPECT_EQ(d.default_config(strided).get_or("skinny", -1), 0);
}

// The canonical form (what a tuner measures once): points that differ only where the shape
// makes no difference share one; points that run differently do not.
TEST(GemmDescriptor, CanonicalFormMergesOnlyPointsThatRunAlike) {
  const auto& d = gemm_f32_cpu_descriptor();
  ASSERT_TRUE(d.canonical);
  const auto point = [](std::int64_t tm, std::int64_t tn, std::int64_t tk, std::int64_t threads,
                        std::int64_t micro_n = 0, std::int64_t block_m = 0,
                        std::int64_t skinny = 0) {
    LaunchConfig c;
    c.set("tile_m", tm).set("tile_n", tn).set("tile_k", tk).set("threads", threads);
    c.set("skinny", skinny).set("split_k", 1).set("micro_n", micro_n).set("block_m", block_m);
    return c;
  };
  const auto same = [&](const ShapeKey& key, const LaunchConfig& a, const LaunchConfig& b) {
    return d.canonical(key, a).str() == d.canonical(key, b).str();
  };
  const ShapeKey small = addmm_shape_key(8, 16, 24);
  // Tiles taller/wider than the matrix, K blocks deeper than K: one task, one K block.
  EXPECT_TRUE(same(small, point(12, 32, 64, 1), point(1536, 2048, 512, 1)));
  EXPECT_FALSE(same(small, point(6, 32, 64, 1), point(12, 32, 64, 1)));
  // Threads beyond the tasks idle: two tasks (tile_m 6 on M = 8) can use two, one cannot.
  EXPECT_TRUE(same(small, point(12, 32, 64, 1), point(12, 32, 64, 2)));
  EXPECT_FALSE(same(small, point(6, 32, 64, 1), point(6, 32, 64, 2)));
  const ShapeKey deep = addmm_shape_key(37, 1000, 300);
  EXPECT_FALSE(same(deep, point(48, 64, 64, 1), point(48, 64, 128, 1)));
  // micro_n 0 is the ISA's own width (one of those it has); other widths differ where the
  // ISA has them.
  const std::vector<std::int64_t> widths = gemm_cpu_micro_widths();
  const std::int64_t own = d.canonical(deep, point(48, 64, 64, 1, 0)).get_or("micro_n", -1);
  EXPECT_NE(std::find(widths.begin(), widths.end(), own), widths.end()) << own;
  EXPECT_TRUE(same(deep, point(48, 64, 64, 1, 0), point(48, 64, 64, 1, own)));
  for (const std::int64_t w : widths) {
    if (w != widths.front()) {
      EXPECT_FALSE(same(deep, point(48, 64, 64, 1, widths.front()), point(48, 64, 64, 1, w)));
    }
  }
  // block_m: every A block at least as tall as the task is the same; a shorter one cuts it.
  EXPECT_TRUE(same(deep, point(192, 64, 64, 1, 0, 48), point(192, 64, 64, 1, 0, 96)));
  EXPECT_TRUE(same(deep, point(192, 64, 64, 1, 0, 48), point(192, 64, 64, 1, 0, 0)));
  const ShapeKey tall = addmm_shape_key(1024, 1024, 1024);
  EXPECT_FALSE(same(tall, point(768, 256, 256, 1, 0, 96), point(768, 256, 256, 1, 0, 384)));
  EXPECT_FALSE(same(tall, point(768, 256, 256, 1, 0, 96), point(768, 256, 256, 1, 0, 0)));
  // The skinny path has no tile_m or K blocks.
  EXPECT_TRUE(same(small, point(6, 32, 64, 1, 0, 0, 1), point(768, 32, 512, 1, 0, 0, 1)));
  EXPECT_FALSE(same(small, point(6, 32, 64, 1, 0, 0, 1), point(6, 32, 64, 1, 0, 0, 0)));
}

TEST(GemmDescriptor, ShapeKeysAndCostModel) {
  const auto& d = gemm_f32_cpu_descriptor();
  const ShapeKey key = addmm_shape_key(512, 768, 3072);
  EXPECT_EQ(key.str(), "aten::addmm(f32[3072]c,f32[512,768]c,f32[768,3072]c)");
  const GemmShape s = gemm_shape(key);
  EXPECT_EQ(s.m, 512);
  EXPECT_EQ(s.k, 768);
  EXPECT_EQ(s.n, 3072);
  EXPECT_DOUBLE_EQ(d.flop_count(key), 2.0 * 512 * 768 * 3072);
  EXPECT_DOUBLE_EQ(d.byte_count(key), 4.0 * (512 * 768 + 768 * 3072 + 512 * 3072 + 3072));
  const GemmShape mm = gemm_shape(addmm_shape_key(3, 4, 5, false));
  EXPECT_EQ(mm.m, 3);
  EXPECT_THROW(gemm_shape(ShapeKey::parse("aten::mm(f32[3,4]c,f32[5,6]c)")), ValueError);
  EXPECT_THROW(gemm_shape(ShapeKey::parse("aten::relu(f32[3]c)")), ValueError);
}

TEST(GemmDescriptor, CudaSpaceMatchesCompiledVariants) {
  const auto& d = gemm_f32_cuda_descriptor();
  EXPECT_EQ(d.device, DeviceType::kCUDA);
  const auto points = d.space.enumerate();
  EXPECT_EQ(points.size(), 18U);  // the instantiations in gemm_cuda.cu
  for (const auto& p : points) {
    const LaunchConfig full = d.complete(addmm_shape_key(1000, 64, 3000), p);
    EXPECT_EQ(full.block.x, 256) << full.str();
    EXPECT_LE(full.shared_mem_bytes, 48 * 1024);
  }
  const ShapeKey key = addmm_shape_key(4096, 4096, 4096);
  EXPECT_TRUE(d.can_run(key, d.default_config(key)).is_ok());
}

TEST(GemmDescriptor, Bf16SpaceMatchesCompiledVariantsAndRefusesOtherDtypes) {
  const auto& d = gemm_bf16_cuda_descriptor();
  EXPECT_EQ(d.device, DeviceType::kCUDA);
  ASSERT_EQ(d.dtypes, std::vector<DType>{DType::kBFloat16});
  const auto points = d.space.enumerate();
  EXPECT_EQ(points.size(), 5U);  // KA_CUDA_BF16_GEMM_VARIANTS
  const ShapeKey key = mm_bf16_shape_key(1000, 64, 3000);
  for (const auto& p : points) {
    const LaunchConfig full = d.complete(key, p);
    EXPECT_EQ(full.block.x, 32 * p.get_or("warps_m", 0) * p.get_or("warps_n", 0)) << full.str();
    EXPECT_EQ(full.grid.x, (3000 + p.get_or("tile_n", 0) - 1) / p.get_or("tile_n", 1));
    EXPECT_LE(full.shared_mem_bytes, 48 * 1024);
  }
  const ShapeKey big = mm_bf16_shape_key(4096, 4096, 4096);
  EXPECT_EQ(d.default_config(big).get_or("tile_m", 0), 128);
  EXPECT_TRUE(d.can_run(big, d.default_config(big)).is_ok());
  EXPECT_DOUBLE_EQ(d.flop_count(big), 2.0 * 4096 * 4096 * 4096);
  EXPECT_DOUBLE_EQ(d.byte_count(big), 2.0 * 3 * 4096 * 4096);
  const ShapeKey f32 = addmm_shape_key(64, 64, 64);
  EXPECT_FALSE(d.can_run(f32, d.default_config(f32)).is_ok());
}

TEST(GemmDescriptor, CudaKernelRefusesHostTensors) {
  float x = 0.0F;
  AddmmArgs args;
  args.out = TensorView::contiguous(&x, DType::kFloat32, Device::cpu(), {1, 1});
  args.mat1 = args.out;
  args.mat2 = args.out;
  LaunchConfig c = gemm_f32_cuda_descriptor().default_config(addmm_shape_key(1, 1, 1));
  if (cuda_compiled()) {
    EXPECT_THROW((void)gemm_f32_cuda(args, c, nullptr), ValueError);
  } else {
    EXPECT_THROW((void)gemm_f32_cuda(args, c, nullptr), NotImplementedError);
  }
}

}  // namespace
}  // namespace ka::kernels
