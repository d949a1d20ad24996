// The CUDA row kernels (softmax, layer_norm, sum) and their launch plans run on the CPU (Note
// [SIMT on the host]) against libtorch: group-per-row and thread-per-row kernels, rows that
// fit the per-thread cache and rows that do not, every block shape of the space, prologues,
// affine and non-affine layer_norm, sums over inner, outer and all dims. The GPU run of the
// same kernels is tests/device/kernels_cuda_test.cpp.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "torch_view.hpp"

// After ATen and gtest: it redefines __shared__ and defines threadIdx & co. for the kernels.
#include "simt_host.hpp"

#include <ka/kernels/detail/reduction_cuda_kernels.cuh>

namespace ka::kernels::cuda_detail {
namespace {

// The view the launch plans check (a CUDA tensor) of host memory the emulated kernels read.
TensorView device_view(const at::Tensor& t) { return test::view_of(t, Device::cuda()); }

LaunchConfig rows_config(std::int64_t threads, std::int64_t rows) {
  LaunchConfig c;
  c.set("block_threads", threads).set("rows_per_block", rows);
  return c;
}

void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double scale = std::max(1.0, want.abs().max().item<double>());
  const double err = (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
  EXPECT_LE(err, 2e-5 * scale) << what;
}

// softmax(x) over `dim` through plan_softmax and the kernel it picks.
at::Tensor softmax(const at::Tensor& x, int dim, const LaunchConfig& config, bool* thread_rows) {
  at::Tensor out = at::full_like(x, NAN);
  SoftmaxArgs args;
  args.out = device_view(out);
  args.inputs[0] = device_view(x);
  args.prologue.set_result(args.prologue.input(0));
  args.dim = dim;
  SoftmaxLaunch l;
  EXPECT_TRUE(plan_softmax(args, config, l).is_ok()) << config.str();
  run_softmax(args, l, test::simt::Launcher{});
  if (thread_rows != nullptr) *thread_rows = l.thread_rows;
  return out;
}

TEST(ReductionCudaEmulated, SoftmaxEveryBlockShape) {
  at::manual_seed(1);
  const at::Tensor x = at::randn({9, 100}) * 4;
  for (const LaunchConfig& point : softmax_f32_cuda_descriptor().space.enumerate()) {
    expect_close(softmax(x, 1, point, nullptr), at::softmax(x, 1), "softmax 9x100 " + point.str());
  }
}

TEST(ReductionCudaEmulated, SoftmaxLongRowsOuterDimsAndAPrologue) {
  at::manual_seed(2);
  // 40 rows of 700: more than 32 threads x 8 cached elements, so each thread reads twice.
  const at::Tensor x = at::randn({40, 700});
  expect_close(softmax(x, 1, rows_config(64, 2), nullptr), at::softmax(x, 1), "rows of 700");
  // Over dim 0 of [30, 50]: 50 strided rows, a group each.
  const at::Tensor y = at::randn({30, 50});
  bool thread_rows = true;
  expect_close(softmax(y, 0, rows_config(128, 4), &thread_rows), at::softmax(y, 0), "dim 0");
  EXPECT_FALSE(thread_rows);
  // Over dim 0 of [6, 4100]: 4100 strided rows, a thread each.
  const at::Tensor z = at::randn({6, 4100});
  expect_close(softmax(z, 0, rows_config(256, 1), &thread_rows), at::softmax(z, 0),
               "dim 0, thread rows");
  EXPECT_TRUE(thread_rows);
  // A fused prologue: softmax(x * 0.125 + mask), mask broadcast over the rows.
  const at::Tensor q = at::randn({12, 33});
  const at::Tensor mask = at::randn({33});
  at::Tensor out = at::full_like(q, NAN);
  SoftmaxArgs args;
  args.out = device_view(out);
  args.inputs[0] = device_view(q);
  const at::Tensor mask_b = mask.expand({12, 33});
  args.inputs[1] = device_view(mask_b);
  EwProgram& p = args.prologue;
  p.set_result(p.binary(EwOp::kAdd, p.binary(EwOp::kMul, p.input(0), p.scalar(0.125F)),
                        p.input(1)));
  args.dim = 1;
  SoftmaxLaunch l;
  ASSERT_TRUE(plan_softmax(args, rows_config(64, 2), l).is_ok());
  run_softmax(args, l, test::simt::Launcher{});
  expect_close(out, at::softmax(q * 0.125 + mask, 1), "softmax(x * 0.125 + mask)");
}

at::Tensor layer_norm(const at::Tensor& x, int normalized_dims, const at::Tensor& w,
                      const at::Tensor& b, const LaunchConfig& config) {
  at::Tensor out = at::full_like(x, NAN);
  LayerNormArgs args;
  args.out = device_view(out);
  args.inputs[0] = device_view(x);
  args.prologue.set_result(args.prologue.input(0));
  args.normalized_dims = normalized_dims;
  args.weight = device_view(w);
  args.bias = device_view(b);
  args.eps = 1e-5F;
  LayerNormLaunch l;
  EXPECT_TRUE(plan_layer_norm(args, config, l).is_ok()) << config.str();
  run_layer_norm(args, l, test::simt::Launcher{});
  return out;
}

TEST(ReductionCudaEmulated, LayerNormAffineOrNotOverOneOrTwoDims) {
  at::manual_seed(3);
  const at::Tensor x = at::randn({13, 70}) * 3 + 1;
  const at::Tensor w = at::randn({70});
  const at::Tensor b = at::randn({70});
  for (const LaunchConfig& point : layer_norm_f32_cuda_descriptor().space.enumerate()) {
    if (point.get_or("block_threads", 0) > 256) continue;  // the larger blocks below
    expect_close(layer_norm(x, 1, w, b, point), at::layer_norm(x, {70}, w, b, 1e-5),
                 "layer_norm 13x70 " + point.str());
  }
  const at::Tensor y = at::randn({5, 6, 300});
  const at::Tensor w2 = at::randn({6, 300});
  expect_close(layer_norm(y, 2, w2, at::Tensor(), rows_config(1024, 1)),
               at::layer_norm(y, {6, 300}, w2, {}, 1e-5), "over the last two dims, no bias");
  expect_close(layer_norm(y, 1, at::Tensor(), at::Tensor(), rows_config(512, 2)),
               at::layer_norm(y, {300}, {}, {}, 1e-5), "no weight, no bias");
}

at::Tensor sum(const at::Tensor& x, std::uint64_t mask, const LaunchConfig& config,
               bool* thread_rows) {
  std::vector<std::int64_t> sizes(x.sizes().begin(), x.sizes().end());
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (((mask >> d) & 1U) != 0) sizes[d] = 1;
  }
  at::Tensor out = at::full(sizes, NAN);
  SumArgs args;
  args.out = device_view(out);
  args.in = device_view(x);
  args.reduce_mask = mask;
  SumLaunch l;
  EXPECT_TRUE(plan_sum(args, config, l).is_ok()) << config.str();
  run_sum(l, test::simt::Launcher{});
  *thread_rows = l.thread_rows;
  return out;
}

TEST(ReductionCudaEmulated, SumsOverInnerOuterAndAllDims) {
  at::manual_seed(4);
  const at::Tensor x = at::randn({7, 11, 130});
  bool thread_rows = true;
  expect_close(sum(x, 0b100, rows_config(64, 2), &thread_rows), x.sum({2}, true), "last dim");
  EXPECT_FALSE(thread_rows);
  expect_close(sum(x, 0b001, rows_config(256, 1), &thread_rows), x.sum({0}, true), "first dim");
  EXPECT_TRUE(thread_rows);
  expect_close(sum(x, 0b111, rows_config(1024, 1), &thread_rows), x.sum({0, 1, 2}, true),
               "all dims");
  const at::Tensor t = x.transpose(1, 2);  // [7, 130, 11], the reduced dim strided
  expect_close(sum(t, 0b010, rows_config(128, 4), &thread_rows), t.sum({1}, true),
               "a strided middle dim");
}

}  // namespace
}  // namespace ka::kernels::cuda_detail
