// The CPU GEMM's hot path allocates nothing once warm: packing buffers are per thread and
// only grow, validation builds no strings unless it refuses, and the tasks handed to the
// thread pool fit std::function's inline storage.
#include "alloc_counter.hpp"
#include "pool_warmup.hpp"

#include <ka/core/fingerprint.hpp>
#include <ka/kernels/gemm.hpp>

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace ka::kernels {
namespace {

struct Problem {
  std::vector<float> a, b, bias, out;
  AddmmArgs args;
  Problem(std::int64_t m, std::int64_t k, std::int64_t n)
      : a(static_cast<std::size_t>(m * k), 0.5F),
        b(static_cast<std::size_t>(k * n), 0.25F),
        bias(static_cast<std::size_t>(n), 1.0F),
        out(static_cast<std::size_t>(m * n), 0.0F) {
    args.mat1 = TensorView::contiguous(a.data(), DType::kFloat32, Device::cpu(), {m, k});
    args.mat2 = TensorView::contiguous(b.data(), DType::kFloat32, Device::cpu(), {k, n});
    args.self = TensorView::contiguous(bias.data(), DType::kFloat32, Device::cpu(), {n});
    args.out = TensorView::contiguous(out.data(), DType::kFloat32, Device::cpu(), {m, n});
  }
};

// Allocations made by `calls` calls of the GEMM once warm: after every pool thread the config
// uses has run the GEMM once (its private buffers grow then, once) and `warm_up` more calls.
long allocations_when_warm(Problem& p, const LaunchConfig& config, int warm_up, int calls) {
  test::on_each_pool_thread(config.get_or("threads", 1),
                      [&] { EXPECT_TRUE(gemm_f32_cpu(p.args, config).is_ok()); });
  for (int i = 0; i < warm_up; ++i) EXPECT_TRUE(gemm_f32_cpu(p.args, config).is_ok());
  const long before = ka_test_allocation_count();
  for (int i = 0; i < calls; ++i) {
    if (!gemm_f32_cpu(p.args, config).is_ok()) return -1;
  }
  return ka_test_allocation_count() - before;
}

LaunchConfig point(std::int64_t tm, std::int64_t tn, std::int64_t tk, std::int64_t threads,
                   std::int64_t skinny) {
  LaunchConfig c;
  c.set("tile_m", tm).set("tile_n", tn).set("tile_k", tk).set("threads", threads);
  c.set("skinny", skinny).set("split_k", 1).set("micro_n", 0).set("block_m", 0);
  return c;
}

TEST(GemmCpuHotPath, PackedPathAllocatesNothingWhenWarm) {
  Problem p(100, 300, 200);
  EXPECT_EQ(allocations_when_warm(p, point(48, 64, 128, 1, 0), 2, 20), 0);
  // A complete config (grid and block filled) goes through the same check.
  const auto full = gemm_f32_cpu_descriptor().complete(addmm_shape_key(100, 300, 200),
                                                       point(48, 64, 128, 1, 0));
  EXPECT_EQ(allocations_when_warm(p, full, 1, 20), 0);
}

TEST(GemmCpuHotPath, ThreadedPathAllocatesNothingWhenWarm) {
  // Many tiles and many warm-up calls, so every worker has grown its packing buffer.
  Problem p(192, 256, 512);
  EXPECT_EQ(allocations_when_warm(p, point(12, 32, 256, 2, 0), 50, 20), 0);
}

TEST(GemmCpuHotPath, SkinnyPathAllocatesNothingWhenWarm) {
  Problem p(3, 500, 700);
  EXPECT_EQ(allocations_when_warm(p, point(6, 64, 256, 1, 1), 2, 20), 0);
  EXPECT_EQ(allocations_when_warm(p, point(6, 64, 256, 2, 1), 20, 20), 0);
  // Split K: partials in the launch's scratch, no workspace. (One thread: the per-thread
  // growth is covered above.)
  Problem narrow(1, 4000, 64);
  LaunchConfig split = point(6, 64, 256, 1, 1);
  split.set("split_k", 2);
  EXPECT_EQ(allocations_when_warm(narrow, split, 20, 20), 0);
}

TEST(GemmCpuHotPath, TheCounterSeesTheKernelsOwnAllocations) {
  // The tests above would pass trivially if the counter missed allocations. A direct call of
  // operator new (never elided, unlike a new-expression) counts exactly once...
  const long before = ka_test_allocation_count();
  void* raw = ::operator new(64);
  EXPECT_EQ(ka_test_allocation_count() - before, 1);
  ::operator delete(raw);
  // ...and a cold call on a fresh thread grows that thread's packing buffer, which counts.
  Problem p(100, 300, 200);
  long cold = -1;
  std::thread fresh([&] {
    const long start = ka_test_allocation_count();
    EXPECT_TRUE(gemm_f32_cpu(p.args, point(48, 64, 128, 1, 0)).is_ok());
    cold = ka_test_allocation_count() - start;
  });
  fresh.join();
  EXPECT_GE(cold, 1);
}

}  // namespace
}  // namespace ka::kernels
