// The CUDA SGEMM kernels run on the CPU (Note [SIMT on the host]): every compiled variant
// against libtorch on ragged and exact tiles, float4-eligible and scalar layouts, transposed
// operands, bias, alpha, beta, activations and batches. The GPU run of the same kernels is
// tests/device/kernels_cuda_test.cpp.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "torch_view.hpp"

// After ATen and gtest: it redefines __shared__ and defines threadIdx & co. for the kernels.
#include "simt_host.hpp"

#include <ka/kernels/detail/gemm_cuda_kernels.cuh>

namespace ka::kernels::cuda_detail {
namespace {

// The view the launch plans check (a CUDA tensor) of host memory the emulated kernels read.
TensorView device_view(const at::Tensor& t) { return test::view_of(t, Device::cuda()); }

LaunchConfig config_of(const SgemmVariant& v) {
  LaunchConfig c;
  c.set("tile_m", v.bm).set("tile_n", v.bn).set("tile_k", v.bk);
  c.set("thread_m", v.tm).set("thread_n", v.tn).set("vec", v.vec);
  return c;
}

std::string name_of(const SgemmVariant& v) { return config_of(v).str(); }

// out = act(beta * self + alpha * a @ b) through plan_addmm and the emulated grid; returns the
// plan (whether it took float4 rows).
SgemmLaunch addmm(const at::Tensor& out, const at::Tensor& self, const at::Tensor& a,
                  const at::Tensor& b, float beta, float alpha, Epilogue act,
                  const SgemmVariant& v) {
  AddmmArgs args;
  args.out = device_view(out);
  args.self = device_view(self);
  args.mat1 = device_view(a);
  args.mat2 = device_view(b);
  args.beta = beta;
  args.alpha = alpha;
  args.epilogue = act;
  SgemmLaunch l;
  EXPECT_TRUE(plan_addmm(args, config_of(v), l).is_ok()) << name_of(v);
  run_sgemm(l, test::simt::Launcher{});
  return l;
}

void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  const double scale = std::max(1.0, want.abs().max().item<double>());
  const double err = (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
  EXPECT_LE(err, 1e-5 * scale) << what;
}

TEST(SgemmCudaEmulated, EveryVariantMatchesLibtorch) {
  at::manual_seed(7);
  for (const SgemmVariant& v : sgemm_variants()) {
    // Ragged in every dim, no float4 layout (k and n not multiples of 4).
    {
      const at::Tensor a = at::randn({37, 29});
      const at::Tensor b = at::randn({29, 45});
      at::Tensor c = at::full({37, 45}, NAN);
      const SgemmLaunch l = addmm(c, at::Tensor(), a, b, 0.0F, 1.0F, Epilogue::kNone, v);
      EXPECT_FALSE(l.op.vec_a || l.op.vec_b);
      expect_close(c, at::mm(a, b), name_of(v) + ": 37x29 @ 29x45");
    }
    // float4 rows for both operands, tiles ragged in m and n, several K slices.
    {
      const at::Tensor a = at::randn({70, 40});
      const at::Tensor b = at::randn({40, 132});
      at::Tensor c = at::full({70, 132}, NAN);
      const SgemmLaunch l = addmm(c, at::Tensor(), a, b, 0.0F, 1.0F, Epilogue::kNone, v);
      EXPECT_TRUE(l.op.vec_a && l.op.vec_b);
      expect_close(c, at::mm(a, b), name_of(v) + ": 70x40 @ 40x132");
    }
  }
}

TEST(SgemmCudaEmulated, AnEmptyReductionLeavesBetaTimesBias) {
  // K = 0 (ka-bench's smoke suite has one): no K slice runs, the output is beta * bias.
  const at::Tensor a = at::randn({8, 0});
  const at::Tensor b = at::randn({0, 16});
  const at::Tensor bias = at::randn({16});
  for (const SgemmVariant& v : sgemm_variants()) {
    at::Tensor c = at::full({8, 16}, NAN);
    addmm(c, bias, a, b, 2.0F, 1.0F, Epilogue::kNone, v);
    expect_close(c, at::addmm(bias, a, b, 2.0, 1.0), name_of(v) + ": 8x0 @ 0x16 + 2 bias");
  }
}

TEST(SgemmCudaEmulated, TransposedOperandsBiasScalesAndActivations) {
  at::manual_seed(8);
  const at::Tensor at_ = at::randn({24, 50});  // A = at_^T: [50, 24], unit stride along m
  const at::Tensor b = at::randn({24, 36});
  const at::Tensor bt = at::randn({36, 24});   // B = bt^T: [24, 36], unit stride along k
  const at::Tensor bias = at::randn({36});
  for (const SgemmVariant& v : sgemm_variants()) {
    at::Tensor c = at::full({50, 36}, NAN);
    addmm(c, bias, at_.t(), b, -2.0F, 0.5F, Epilogue::kGeluTanh, v);
    expect_close(c, at::gelu(at::addmm(bias, at_.t(), b, -2.0, 0.5), "tanh"),
                 name_of(v) + ": gelu_tanh(-2 bias + 0.5 A^T B)");

    at::Tensor d = at::full({50, 36}, NAN);
    addmm(d, at::Tensor(), at_.t(), bt.t(), 0.0F, 1.0F, Epilogue::kRelu, v);
    expect_close(d, at::relu(at::mm(at_.t(), bt.t())), name_of(v) + ": relu(A^T B^T)");
  }
}

TEST(SgemmCudaEmulated, BatchesAndAnUnalignedStart) {
  at::manual_seed(9);
  const at::Tensor a = at::randn({3, 33, 24});
  const at::Tensor b = at::randn({3, 24, 20});
  // One float past a 16-byte boundary: float4_rows refuses it, the scalar loads serve.
  const at::Tensor storage = at::randn({1 + 24 * 20});
  const at::Tensor b_off = storage.slice(0, 1).view({24, 20});
  for (const SgemmVariant& v : sgemm_variants()) {
    at::Tensor c = at::full({3, 33, 20}, NAN);
    BmmArgs args;
    args.out = device_view(c);
    args.mat1 = device_view(a);
    args.mat2 = device_view(b);
    SgemmLaunch l;
    ASSERT_TRUE(plan_bmm(args, config_of(v), l).is_ok()) << name_of(v);
    EXPECT_EQ(l.batch, 3);
    run_sgemm(l, test::simt::Launcher{});
    expect_close(c, at::bmm(a, b), name_of(v) + ": bmm 3 x (33x24 @ 24x20)");

    const at::Tensor a2 = a[1];
    at::Tensor c2 = at::full({33, 20}, NAN);
    const SgemmLaunch l2 = addmm(c2, at::Tensor(), a2, b_off, 0.0F, 1.0F, Epilogue::kNone, v);
    EXPECT_FALSE(l2.op.vec_b);
    expect_close(c2, at::mm(a2, b_off), name_of(v) + ": B at an odd float offset");
  }
}

TEST(SgemmCudaEmulated, PlansRefuseWhatTheKernelsCannotRun) {
  const at::Tensor a = at::randn({4, 5});
  const at::Tensor b = at::randn({5, 6});
  at::Tensor c = at::empty({4, 6});
  AddmmArgs args;
  args.out = device_view(c);
  args.mat1 = device_view(a);
  args.mat2 = device_view(b);
  SgemmLaunch l;
  LaunchConfig odd = config_of(sgemm_variants().front());
  odd.set("vec", 4);  // 32x32 tiles with 2x2 thread tiles: not compiled with float4 loads
  EXPECT_FALSE(plan_addmm(args, odd, l).is_ok());
  args.mat2 = device_view(at::randn({6, 6}));
  EXPECT_THROW((void)plan_addmm(args, config_of(sgemm_variants().front()), l), ValueError);
  args.mat2 = test::view_of(b);  // on the host
  EXPECT_THROW((void)plan_addmm(args, config_of(sgemm_variants().front()), l), ValueError);
}

}  // namespace
}  // namespace ka::kernels::cuda_detail
