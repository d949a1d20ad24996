// The CUDA element-wise kernels and their launch plan run on the CPU (Note [SIMT on the host])
// against libtorch: the float4 path with its scalar tail, the dense path (unaligned operands,
// broadcast scalars), the strided path (broadcast rows, transposed views), every block shape
// and unroll of the space, and an in-place call. The GPU run of the same kernels is
// tests/device/kernels_cuda_test.cpp.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "torch_view.hpp"

// After ATen and gtest: it redefines __shared__ and defines threadIdx & co. for the kernels.
#include "simt_host.hpp"

#include <ka/kernels/detail/elementwise_cuda_kernels.cuh>

namespace ka::kernels::cuda_detail {
namespace {

using Kind = ElementwiseLaunch::Kind;

// The view the launch plans check (a CUDA tensor) of host memory the emulated kernels read.
TensorView device_view(const at::Tensor& t) { return test::view_of(t, Device::cuda()); }

// out = gelu_tanh(x * 0.5 + y) - x, the inputs as given (any strides, broadcast views).
Kind run_chain(const at::Tensor& out, const at::Tensor& x, const at::Tensor& y,
               const LaunchConfig& config) {
  ElementwiseArgs args;
  args.out = device_view(out);
  args.inputs[0] = device_view(x);
  args.inputs[1] = device_view(y);
  EwProgram& p = args.program;
  const int x0 = p.input(0);
  p.set_result(p.binary(
      EwOp::kSub,
      p.unary(EwOp::kGeluTanh, p.binary(EwOp::kAdd, p.binary(EwOp::kMul, x0, p.scalar(0.5F)),
                                        p.input(1))),
      x0));
  ElementwiseLaunch l;
  EXPECT_TRUE(plan_elementwise(args, config, l).is_ok()) << config.str();
  run_elementwise(args, l, test::simt::Launcher{});
  return l.kind;
}

at::Tensor want_chain(const at::Tensor& x, const at::Tensor& y) {
  return at::gelu(x * 0.5 + y, "tanh") - x;
}

void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  const double err = (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
  EXPECT_LE(err, 1e-5 * std::max(1.0, want.abs().max().item<double>())) << what;
}

LaunchConfig ew_config(std::int64_t threads, std::int64_t items) {
  LaunchConfig c;
  c.set("block_threads", threads).set("items_per_thread", items);
  return c;
}

TEST(ElementwiseCudaEmulated, EveryBlockShapeOnTheVectorPathAndItsTail) {
  at::manual_seed(5);
  // 1003 elements: 250 float4s and a scalar tail of 3.
  const at::Tensor x = at::randn({1003});
  const at::Tensor y = at::randn({1003});
  for (const LaunchConfig& point : elementwise_f32_cuda_descriptor().space.enumerate()) {
    at::Tensor out = at::full({1003}, NAN);
    EXPECT_EQ(run_chain(out, x, y, point), Kind::kVec4) << point.str();
    expect_close(out, want_chain(x, y), "float4 path " + point.str());
  }
}

TEST(ElementwiseCudaEmulated, DenseStridedAndInPlace) {
  at::manual_seed(6);
  // Unaligned (one float in): the dense scalar path, every unroll.
  const at::Tensor xs = at::randn({1 + 777});
  const at::Tensor x = xs.slice(0, 1);
  const at::Tensor y = at::randn({777});
  for (const std::int64_t items : {1, 2, 4, 8}) {
    at::Tensor out = at::full({777}, NAN);
    EXPECT_EQ(run_chain(out, x, y, ew_config(128, items)), Kind::kDense);
    expect_close(out, want_chain(x, y), "dense, items " + std::to_string(items));
  }
  // A broadcast scalar input rides the vector path.
  {
    const at::Tensor a = at::randn({64, 33});
    const at::Tensor s = at::randn({1}).expand({64, 33});
    at::Tensor out = at::full({64, 33}, NAN);
    EXPECT_EQ(run_chain(out, a, s, ew_config(256, 4)), Kind::kVec4);
    expect_close(out, want_chain(a, s), "a broadcast scalar");
  }
  // A bias row broadcast over the rows, and a transposed view: the strided path.
  {
    const at::Tensor a = at::randn({45, 70});
    const at::Tensor bias = at::randn({70}).expand({45, 70});
    at::Tensor out = at::full({45, 70}, NAN);
    EXPECT_EQ(run_chain(out, a, bias, ew_config(64, 2)), Kind::kStrided);
    expect_close(out, want_chain(a, bias), "bias rows");
    const at::Tensor at_ = at::randn({70, 45}).t();
    at::Tensor out2 = at::full({45, 70}, NAN);
    EXPECT_EQ(run_chain(out2, at_, a, ew_config(512, 8)), Kind::kStrided);
    expect_close(out2, want_chain(at_, a), "a transposed input");
  }
  // In place: out is x.
  {
    at::Tensor z = at::randn({300});
    const at::Tensor w = at::randn({300});
    const at::Tensor want = want_chain(z, w);
    run_chain(z, z, w, ew_config(64, 1));
    expect_close(z, want, "in place");
  }
}

}  // namespace
}  // namespace ka::kernels::cuda_detail
