// The CUDA bf16 tensor-core GEMM and its launch plan run on the CPU (Note [SIMT on the host],
// WMMA from tests/support/simt_wmma.hpp) against libtorch's float GEMM of the same bf16
// values: every compiled variant on ragged and whole tiles, 16-byte and scalar layouts,
// transposed operands, alpha and activations. The GPU run is tests/device/kernels_cuda_test.cpp.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <string>

#include "torch_view.hpp"

// After ATen and gtest: it redefines __shared__ and defines threadIdx & co. for the kernels.
#include "simt_host.hpp"
#include "simt_wmma.hpp"

#include <ka/kernels/detail/gemm_bf16_cuda_kernels.cuh>

namespace ka::kernels::cuda_detail {
namespace {

// The view the launch plans check (a CUDA tensor) of host memory the emulated kernels read.
TensorView device_view(const at::Tensor& t) { return test::view_of(t, Device::cuda()); }

LaunchConfig config_of(const Bf16GemmVariant& v) {
  LaunchConfig c;
  c.set("tile_m", v.bm).set("tile_n", v.bn).set("warps_m", v.wm).set("warps_n", v.wn);
  return c;
}

// act(alpha * a @ b) in bf16 through the plan and the emulated grid.
Bf16GemmLaunch mm(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, float alpha,
                  Epilogue act, const LaunchConfig& config) {
  AddmmArgs args;
  args.out = device_view(out);
  args.mat1 = device_view(a);
  args.mat2 = device_view(b);
  args.alpha = alpha;
  args.epilogue = act;
  Bf16GemmLaunch l;
  EXPECT_TRUE(plan_gemm_bf16(args, config, l).is_ok()) << config.str();
  run_gemm_bf16(l, test::simt::Launcher{});
  return l;
}

// Within the float result's rounding to bf16 (2^-8 relative) and a little summation slack.
void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  const at::Tensor g = got.to(at::kDouble);
  const at::Tensor w = want.to(at::kDouble);
  const double err = ((g - w).abs() - w.abs() * (1.0 / 256)).max().item<double>();
  EXPECT_LE(err, 1e-4 * std::max(1.0, w.abs().max().item<double>())) << what;
}

at::Tensor bf16_randn(at::IntArrayRef sizes) { return at::randn(sizes).to(at::kBFloat16); }

TEST(GemmBf16CudaEmulated, EveryVariantMatchesLibtorch) {
  at::manual_seed(11);
  for (const Bf16GemmVariant& v : bf16_gemm_variants()) {
    const std::string name = config_of(v).str();
    // 16-byte rows (k and n multiples of 8), ragged tiles in m and n, two K slices and a part.
    {
      const at::Tensor a = bf16_randn({70, 72});
      const at::Tensor b = bf16_randn({72, 136});
      at::Tensor c = at::full({70, 136}, NAN).to(at::kBFloat16);
      const Bf16GemmLaunch l = mm(c, a, b, 1.0F, Epilogue::kNone, config_of(v));
      EXPECT_TRUE(l.op.vec_a && l.op.vec_b);
      expect_close(c, at::mm(a.to(at::kFloat), b.to(at::kFloat)), name + ": 70x72 @ 72x136");
    }
    // No 16-byte layout (k = 37, n = 45), alpha and an activation.
    {
      const at::Tensor a = bf16_randn({33, 37});
      const at::Tensor b = bf16_randn({37, 45});
      at::Tensor c = at::full({33, 45}, NAN).to(at::kBFloat16);
      const Bf16GemmLaunch l = mm(c, a, b, 0.5F, Epilogue::kRelu, config_of(v));
      EXPECT_FALSE(l.op.vec_a || l.op.vec_b);
      expect_close(c, at::relu(0.5 * at::mm(a.to(at::kFloat), b.to(at::kFloat))),
                   name + ": relu(0.5 * 33x37 @ 37x45)");
    }
  }
}

TEST(GemmBf16CudaEmulated, TransposedOperandsAndRefusals) {
  at::manual_seed(12);
  const at::Tensor at_ = bf16_randn({40, 50});  // A = at_^T: [50, 40]
  const at::Tensor bt = bf16_randn({24, 40});   // B = bt^T: [40, 24]
  at::Tensor c = at::full({50, 24}, NAN).to(at::kBFloat16);
  const LaunchConfig config =
      gemm_bf16_cuda_descriptor().default_config(mm_bf16_shape_key(50, 40, 24));
  mm(c, at_.t(), bt.t(), 1.0F, Epilogue::kGeluTanh, config);
  expect_close(c, at::gelu(at::mm(at_.t().to(at::kFloat), bt.t().to(at::kFloat)), "tanh"),
               "gelu_tanh(A^T B^T)");

  AddmmArgs args;
  args.out = device_view(c);
  args.mat1 = device_view(at_.t());
  args.mat2 = device_view(bt.t());
  Bf16GemmLaunch l;
  LaunchConfig odd = config;
  odd.set("warps_m", 4).set("tile_m", 64);  // 16 x 32 per warp: not compiled
  EXPECT_FALSE(plan_gemm_bf16(args, odd, l).is_ok());
  args.out.dtype = DType::kFloat32;
  EXPECT_THROW((void)plan_gemm_bf16(args, config, l), ValueError);
  args.out = device_view(c);
  args.mat2 = device_view(bf16_randn({41, 24}));
  EXPECT_THROW((void)plan_gemm_bf16(args, config, l), ValueError);
}

}  // namespace
}  // namespace ka::kernels::cuda_detail
