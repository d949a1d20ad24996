// The CUDA kernels against libtorch's CPU results (the oracle): element-wise programs on dense,
// broadcast, transposed and aliased operands; softmax, layer_norm and sum on every path; the
// SGEMM's epilogues and bmm; the bf16 tensor-core GEMM on every config. Every test skips, with
// the reason, where no GPU is visible.
#include <ka/core/error.hpp>
#include <ka/kernels/elementwise.hpp>
#include <ka/kernels/gemm.hpp>
#include <ka/kernels/reduction.hpp>

#include <ATen/ATen.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "cuda_device.hpp"
#include "unary_references.hpp"

namespace ka::kernels {
namespace {

#define KA_REQUIRE_DEVICE() \
  KA_SKIP_UNLESS_EMPTY(test::no_cuda_device_reason(), "no CUDA device visible")

void check_cuda(cudaError_t e, const char* what) {
  ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorName(e) << ": " << cudaGetErrorString(e);
}

// A float32 or bfloat16 CPU tensor's whole storage mirrored on the device, so that views
// (transposes, broadcasts, offsets) keep their strides. download() copies the device storage
// back into the host one.
class DeviceTensor {
 public:
  explicit DeviceTensor(const at::Tensor& host) : host_(host) {
    const auto bytes = host.storage().nbytes();
    EXPECT_EQ(cudaMalloc(&base_, bytes == 0 ? 4 : bytes), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(base_, storage_base(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  ~DeviceTensor() { cudaFree(base_); }

  [[nodiscard]] TensorView view() const {
    TensorView v;
    v.data = static_cast<char*>(base_) + host_.storage_offset() * host_.element_size();
    v.dtype = host_.scalar_type() == at::kBFloat16 ? DType::kBFloat16 : DType::kFloat32;
    v.device = Device::cuda(0);
    v.ndim = static_cast<int>(host_.dim());
    for (int d = 0; d < v.ndim; ++d) {
      v.sizes[static_cast<std::size_t>(d)] = host_.size(d);
      v.strides[static_cast<std::size_t>(d)] = host_.stride(d);
    }
    return v;
  }
  /// The device contents, as a copy of the host tensor with the same strides.
  [[nodiscard]] at::Tensor download() const {
    at::Tensor copy = at::empty_strided(host_.sizes(), host_.strides(), host_.options());
    // empty_strided allocates exactly the view's extent; copy that extent.
    const auto bytes = copy.storage().nbytes();
    const auto* src =
        static_cast<const char*>(base_) + host_.storage_offset() * host_.element_size();
    EXPECT_EQ(cudaMemcpy(copy.data_ptr(), src, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return copy;
  }

 private:
  [[nodiscard]] const char* storage_base() const {
    return static_cast<const char*>(host_.data_ptr()) -
           host_.storage_offset() * host_.element_size();
  }
  at::Tensor host_;
  void* base_ = nullptr;
};

void sync() { check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

void expect_close(const at::Tensor& got, const at::Tensor& want, double rtol = 1e-4,
                  double atol = 1e-5, const std::string& what = "") {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const bool ok = at::allclose(got, want, rtol, atol, /*equal_nan=*/true);
  EXPECT_TRUE(ok) << what << ": max abs diff "
                  << (got - want).abs().nan_to_num(0.0).max().item<float>();
}

at::Tensor randn(at::IntArrayRef sizes) { return at::randn(sizes, at::kFloat); }

LaunchConfig ew_config(std::int64_t threads, std::int64_t items) {
  LaunchConfig c;
  c.set("block_threads", threads).set("items_per_thread", items);
  return c;
}

LaunchConfig row_config(std::int64_t threads, std::int64_t rows) {
  LaunchConfig c;
  c.set("block_threads", threads).set("rows_per_block", rows);
  return c;
}

// A program reading input 0 unchanged ("r0=in0 -> r0").
EwProgram identity_program() {
  EwProgram p;
  p.set_result(p.input(0));
  return p;
}

// ---- element-wise --------------------------------------------------------------------------

TEST(ElementwiseCuda, EveryUnaryOpMatchesATenIncludingNaN) {
  KA_REQUIRE_DEVICE();
  at::Tensor x = randn({1001}) * 4;
  x[3] = std::numeric_limits<float>::quiet_NaN();
  for (const test::UnaryReference& c : test::unary_references()) {
    at::Tensor out = at::empty_like(x);
    DeviceTensor dx(x);
    DeviceTensor dout(out);
    ElementwiseArgs args;
    args.out = dout.view();
    args.inputs[0] = dx.view();
    args.program.set_result(args.program.unary(c.op, args.program.input(0)));
    ASSERT_TRUE(elementwise_f32_cuda(args, ew_config(128, 4), nullptr));
    sync();
    expect_close(dout.download(), c.reference(x), 1e-5, 1e-6, to_string(c.op));
  }
}

TEST(ElementwiseCuda, BinaryOpsWithBroadcastScalarAndNaNMaximum) {
  KA_REQUIRE_DEVICE();
  at::Tensor a = randn({37, 53});
  at::Tensor b = randn({53}) + 3;                  // broadcast along rows (strided path)
  at::Tensor s = at::full({}, 0.25F, at::kFloat);  // one value (dense path, scalar mask)
  a[2][5] = std::numeric_limits<float>::quiet_NaN();
  const std::pair<EwOp, at::Tensor> cases[] = {
      {EwOp::kAdd, a + b},
      {EwOp::kSub, a - b},
      {EwOp::kMul, a * b},
      {EwOp::kDiv, a / b},
      {EwOp::kMax, at::maximum(a, b)},
  };
  for (const auto& [op, want] : cases) {
    at::Tensor out = at::empty_like(a);
    DeviceTensor da(a);
    DeviceTensor db(b);
    DeviceTensor dout(out);
    ElementwiseArgs args;
    args.out = dout.view();
    args.inputs[0] = da.view();
    args.inputs[1] = broadcast_view(db.view(), args.out.sizes.data(), args.out.ndim);
    args.program.set_result(args.program.binary(op, args.program.input(0), args.program.input(1)));
    ASSERT_TRUE(elementwise_f32_cuda(args, ew_config(256, 2), nullptr));
    sync();
    expect_close(dout.download(), want, 1e-5, 1e-6, to_string(op));
  }
  // a * 0.25 with the scalar as a 0-d input broadcast everywhere.
  at::Tensor out = at::empty_like(a);
  DeviceTensor da(a);
  DeviceTensor ds(s);
  DeviceTensor dout(out);
  ElementwiseArgs args;
  args.out = dout.view();
  args.inputs[0] = da.view();
  args.inputs[1] = broadcast_view(ds.view(), args.out.sizes.data(), args.out.ndim);
  args.program.set_result(
      args.program.binary(EwOp::kMul, args.program.input(0), args.program.input(1)));
  ASSERT_TRUE(elementwise_f32_cuda(args, ew_config(64, 8), nullptr));
  sync();
  expect_close(dout.download(), a * s);
}

// out = gelu(x + 0.5 * y) over every point of the space, on dense operands whose size is not
// a multiple of 4 (float4 body plus tail), on a transposed x and on a misaligned slice.
TEST(ElementwiseCuda, FusedChainOnEveryConfigAndLayout) {
  KA_REQUIRE_DEVICE();
  const auto make_program = [] {
    EwProgram p;
    const int x = p.input(0);
    const int y = p.input(1);
    p.set_result(
        p.unary(EwOp::kGelu, p.binary(EwOp::kAdd, x, p.binary(EwOp::kMul, y, p.scalar(0.5F)))));
    return p;
  };
  at::Tensor base_x = randn({130, 67});
  at::Tensor base_y = randn({130, 67});
  const std::pair<std::string, std::pair<at::Tensor, at::Tensor>> layouts[] = {
      {"dense", {base_x, base_y}},
      {"transposed x", {randn({67, 130}).t(), base_y}},
      {"misaligned",
       {base_x.flatten().narrow(0, 1, 130 * 66).view({130, 66}),
        base_y.flatten().narrow(0, 3, 130 * 66).view({130, 66})}},
  };
  for (const auto& [name, xy] : layouts) {
    const at::Tensor& x = xy.first;
    const at::Tensor& y = xy.second;
    const at::Tensor want = at::gelu(x + 0.5 * y);
    for (const LaunchConfig& point : elementwise_f32_cuda_descriptor().space.enumerate()) {
      at::Tensor out = at::empty(x.sizes(), at::kFloat);
      DeviceTensor dx(x);
      DeviceTensor dy(y);
      DeviceTensor dout(out);
      ElementwiseArgs args;
      args.out = dout.view();
      args.inputs[0] = dx.view();
      args.inputs[1] = dy.view();
      args.program = make_program();
      ASSERT_TRUE(elementwise_f32_cuda(args, point, nullptr)) << point.str();
      sync();
      expect_close(dout.download(), want, 1e-5, 1e-6, name + " " + point.str());
    }
  }
}

TEST(ElementwiseCuda, InPlaceAliasingAndEmptyAndRejections) {
  KA_REQUIRE_DEVICE();
  at::Tensor x = randn({4099});
  const at::Tensor want = at::relu(x * 2);
  DeviceTensor dx(x);
  ElementwiseArgs args;
  args.out = dx.view();
  args.inputs[0] = dx.view();
  args.program.set_result(args.program.unary(
      EwOp::kRelu,
      args.program.binary(EwOp::kMul, args.program.input(0), args.program.scalar(2.0F))));
  ASSERT_TRUE(elementwise_f32_cuda(args, ew_config(1024, 8), nullptr));
  sync();
  expect_close(dx.download(), want);

  // A config outside the space is a Status, not an exception.
  EXPECT_FALSE(elementwise_f32_cuda(args, ew_config(100, 1), nullptr));
  // A CPU tensor is a ValueError.
  ElementwiseArgs bad = args;
  bad.inputs[0].device = Device::cpu();
  EXPECT_THROW(static_cast<void>(elementwise_f32_cuda(bad, ew_config(128, 1), nullptr)),
               ValueError);
  // A partial overlap between out and an input is a ValueError.
  ElementwiseArgs shifted = args;
  shifted.out.data = static_cast<float*>(args.out.data) + 1;
  shifted.out.sizes[0] -= 1;
  shifted.inputs[0].sizes[0] -= 1;
  EXPECT_THROW(static_cast<void>(elementwise_f32_cuda(shifted, ew_config(128, 1), nullptr)),
               ValueError);
  // Nothing to do for an empty output.
  at::Tensor empty = at::empty({0, 5}, at::kFloat);
  DeviceTensor de(empty);
  ElementwiseArgs none;
  none.out = de.view();
  none.inputs[0] = de.view();
  none.program = identity_program();
  EXPECT_TRUE(elementwise_f32_cuda(none, ew_config(128, 1), nullptr));
}

// ---- softmax -------------------------------------------------------------------------------

// softmax(x * 0.125 + mask, dim) with the mask broadcast along the leading dims.
void check_softmax(const at::Tensor& x, int dim, const LaunchConfig& config) {
  at::Tensor mask = at::zeros({x.size(x.dim() - 1)}, at::kFloat);
  mask[0] = -std::numeric_limits<float>::infinity();
  const at::Tensor want = at::softmax(x * 0.125 + mask, dim);
  at::Tensor out = at::empty(x.sizes(), at::kFloat);
  DeviceTensor dx(x);
  DeviceTensor dm(mask);
  DeviceTensor dout(out);
  SoftmaxArgs args;
  args.out = dout.view();
  args.inputs[0] = dx.view();
  args.inputs[1] = broadcast_view(dm.view(), args.out.sizes.data(), args.out.ndim);
  EwProgram& p = args.prologue;
  p.set_result(
      p.binary(EwOp::kAdd, p.binary(EwOp::kMul, p.input(0), p.scalar(0.125F)), p.input(1)));
  args.dim = dim;
  ASSERT_TRUE(softmax_f32_cuda(args, config, nullptr)) << config.str();
  sync();
  expect_close(dout.download(), want, 1e-4, 1e-6,
               "dim " + std::to_string(dim) + " " + config.str());
}

TEST(SoftmaxCuda, LastDimOnEveryConfig) {
  KA_REQUIRE_DEVICE();
  const at::Tensor x = randn({37, 1000}) * 8;
  for (const LaunchConfig& point : softmax_f32_cuda_descriptor().space.enumerate()) {
    check_softmax(x, 1, point);
  }
}

TEST(SoftmaxCuda, NonLastDimsAndTransposedInput) {
  KA_REQUIRE_DEVICE();
  check_softmax(randn({8, 50, 16}), 1, row_config(128, 4));    // few rows: group per row
  check_softmax(randn({8, 50, 1024}), 1, row_config(256, 1));  // many rows: thread per row
  check_softmax(randn({7, 3, 5}), 0, row_config(64, 2));
  check_softmax(randn({96, 40}).t(), 1, row_config(32, 1));  // unit-stride dim is 0
}

TEST(SoftmaxCuda, AllMaskedRowIsNaNAsATen) {
  KA_REQUIRE_DEVICE();
  at::Tensor x = at::full({2, 64}, -std::numeric_limits<float>::infinity(), at::kFloat);
  x[1] = randn({64});
  const at::Tensor want = at::softmax(x, 1);
  at::Tensor out = at::empty_like(x);
  DeviceTensor dx(x);
  DeviceTensor dout(out);
  SoftmaxArgs args;
  args.out = dout.view();
  args.inputs[0] = dx.view();
  args.prologue = identity_program();
  args.dim = 1;
  ASSERT_TRUE(softmax_f32_cuda(args, row_config(64, 2), nullptr));
  sync();
  expect_close(dout.download(), want);
}

// ---- layer_norm ----------------------------------------------------------------------------

void check_layer_norm(const at::Tensor& x, const at::Tensor& residual, int normalized_dims,
                      bool affine, const LaunchConfig& config) {
  std::vector<std::int64_t> shape(x.sizes().end() - normalized_dims, x.sizes().end());
  at::Tensor weight = randn(shape);
  at::Tensor bias = randn(shape);
  const at::Tensor want = at::layer_norm(x + residual, shape, affine ? weight : at::Tensor(),
                                         affine ? bias : at::Tensor(), 1e-5, false);
  at::Tensor out = at::empty(x.sizes(), at::kFloat);
  DeviceTensor dx(x);
  DeviceTensor dr(residual);
  DeviceTensor dw(weight);
  DeviceTensor db(bias);
  DeviceTensor dout(out);
  LayerNormArgs args;
  args.out = dout.view();
  args.inputs[0] = dx.view();
  args.inputs[1] = broadcast_view(dr.view(), args.out.sizes.data(), args.out.ndim);
  EwProgram& p = args.prologue;
  p.set_result(p.binary(EwOp::kAdd, p.input(0), p.input(1)));
  args.normalized_dims = normalized_dims;
  if (affine) {
    args.weight = dw.view();
    args.bias = db.view();
  }
  ASSERT_TRUE(layer_norm_f32_cuda(args, config, nullptr)) << config.str();
  sync();
  expect_close(dout.download(), want, 1e-4, 1e-4, config.str());
}

TEST(LayerNormCuda, ResidualPrologueOnEveryConfig) {
  KA_REQUIRE_DEVICE();
  const at::Tensor x = randn({33, 768}) * 3 + 1;
  const at::Tensor r = randn({33, 768});
  for (const LaunchConfig& point : layer_norm_f32_cuda_descriptor().space.enumerate()) {
    check_layer_norm(x, r, 1, true, point);
  }
}

TEST(LayerNormCuda, SeveralNormalizedDimsStridedAndWithoutAffine) {
  KA_REQUIRE_DEVICE();
  check_layer_norm(randn({4, 7, 96}), randn({96}), 2, true, row_config(128, 1));
  check_layer_norm(randn({4, 7, 96}), randn({7, 96}), 1, false, row_config(64, 2));
  check_layer_norm(randn({50, 20}).t(), randn({20, 50}), 1, true, row_config(32, 1));
}

// ---- sum -----------------------------------------------------------------------------------

void check_sum(const at::Tensor& x, std::vector<std::int64_t> dims, const LaunchConfig& config) {
  std::uint64_t mask = 0;
  for (const auto d : dims) mask |= std::uint64_t{1} << d;
  const at::Tensor want = dims.empty() ? x.clone() : at::sum(x, dims, /*keepdim=*/true);
  at::Tensor out = at::empty(want.sizes(), at::kFloat);
  DeviceTensor dx(x);
  DeviceTensor dout(out);
  SumArgs args;
  args.out = dout.view();
  args.in = dx.view();
  args.reduce_mask = mask;
  ASSERT_TRUE(sum_f32_cuda(args, config, nullptr)) << config.str();
  sync();
  expect_close(dout.download(), want, 1e-4, 1e-4, config.str());
}

TEST(SumCuda, TrailingRowsOnEveryConfig) {
  KA_REQUIRE_DEVICE();
  const at::Tensor x = randn({129, 999});
  for (const LaunchConfig& point : sum_f32_cuda_descriptor().space.enumerate()) {
    check_sum(x, {1}, point);
  }
}

TEST(SumCuda, OuterInnerAllNoneAndTransposed) {
  KA_REQUIRE_DEVICE();
  check_sum(randn({5, 6, 7}), {0, 2}, row_config(128, 1));
  check_sum(randn({300, 40}), {0}, row_config(256, 2));
  check_sum(randn({9000, 3}), {0}, row_config(256, 1));
  check_sum(randn({17, 33, 65}), {0, 1, 2}, row_config(1024, 1));
  check_sum(randn({4, 5}), {}, row_config(32, 1));
  check_sum(randn({40, 70}).t(), {1}, row_config(64, 2));
}

// ---- GEMM epilogues and bmm ----------------------------------------------------------------

TEST(GemmCuda, EveryEpilogueAfterBias) {
  KA_REQUIRE_DEVICE();
  const at::Tensor a = randn({70, 45});
  const at::Tensor b = randn({45, 90});
  const at::Tensor bias = randn({90});
  const std::pair<Epilogue, at::Tensor (*)(const at::Tensor&)> cases[] = {
      {Epilogue::kNone, [](const at::Tensor& t) { return t; }},
      {Epilogue::kRelu, [](const at::Tensor& t) { return at::relu(t); }},
      {Epilogue::kGelu, [](const at::Tensor& t) { return at::gelu(t); }},
      {Epilogue::kGeluTanh, [](const at::Tensor& t) { return at::gelu(t, "tanh"); }},
      {Epilogue::kSigmoid, [](const at::Tensor& t) { return at::sigmoid(t); }},
      {Epilogue::kSilu, [](const at::Tensor& t) { return at::silu(t); }},
  };
  const ShapeKey key = addmm_shape_key(70, 45, 90);
  const LaunchConfig config = gemm_f32_cuda_descriptor().default_config(key);
  for (const auto& [epilogue, act] : cases) {
    at::Tensor out = at::empty({70, 90}, at::kFloat);
    DeviceTensor da(a);
    DeviceTensor db(b);
    DeviceTensor dbias(bias);
    DeviceTensor dout(out);
    AddmmArgs args;
    args.out = dout.view();
    args.self = dbias.view();
    args.mat1 = da.view();
    args.mat2 = db.view();
    args.beta = 0.5F;
    args.alpha = 2.0F;
    args.epilogue = epilogue;
    ASSERT_TRUE(gemm_f32_cuda(args, config, nullptr));
    sync();
    expect_close(dout.download(), act(at::addmm(bias, a, b, 0.5, 2.0)), 1e-4, 1e-4,
                 to_string(epilogue));
  }
}

TEST(GemmCuda, BmmWithTransposedOperandsOnEveryConfig) {
  KA_REQUIRE_DEVICE();
  const at::Tensor a = randn({5, 33, 47});
  const at::Tensor b = randn({5, 65, 47}).transpose(1, 2);  // [5, 47, 65], column-major
  const at::Tensor want = at::bmm(a, b);
  for (const LaunchConfig& point : bmm_f32_cuda_descriptor().space.enumerate()) {
    at::Tensor out = at::empty({5, 33, 65}, at::kFloat);
    DeviceTensor da(a);
    DeviceTensor db(b);
    DeviceTensor dout(out);
    BmmArgs args;
    args.out = dout.view();
    args.mat1 = da.view();
    args.mat2 = db.view();
    ASSERT_TRUE(bmm_f32_cuda(args, point, nullptr)) << point.str();
    sync();
    expect_close(dout.download(), want, 1e-4, 1e-4, point.str());
  }
}

TEST(GemmBf16Cuda, EveryConfigMatchesLibtorch) {
  KA_REQUIRE_DEVICE();
  // 16-byte rows with ragged tiles; then no 16-byte layout, a transposed B, alpha and relu.
  const at::Tensor a1 = randn({70, 72}).to(at::kBFloat16);
  const at::Tensor b1 = randn({72, 136}).to(at::kBFloat16);
  const at::Tensor a2 = randn({33, 37}).to(at::kBFloat16);
  const at::Tensor b2 = randn({45, 37}).to(at::kBFloat16).t();
  const at::Tensor want1 = at::mm(a1.to(at::kFloat), b1.to(at::kFloat));
  const at::Tensor want2 = at::relu(0.5 * at::mm(a2.to(at::kFloat), b2.to(at::kFloat)));
  for (const LaunchConfig& point : gemm_bf16_cuda_descriptor().space.enumerate()) {
    for (int which = 0; which < 2; ++which) {
      const at::Tensor& a = which == 0 ? a1 : a2;
      const at::Tensor& b = which == 0 ? b1 : b2;
      at::Tensor out = at::empty({a.size(0), b.size(1)}, at::kBFloat16);
      DeviceTensor da(a);
      DeviceTensor db(b);
      DeviceTensor dout(out);
      AddmmArgs args;
      args.out = dout.view();
      args.mat1 = da.view();
      args.mat2 = db.view();
      args.alpha = which == 0 ? 1.0F : 0.5F;
      args.epilogue = which == 0 ? Epilogue::kNone : Epilogue::kRelu;
      const ShapeKey key = mm_bf16_shape_key(a.size(0), a.size(1), b.size(1));
      ASSERT_TRUE(gemm_bf16_cuda(args, gemm_bf16_cuda_descriptor().complete(key, point), nullptr))
          << point.str();
      sync();
      // bf16 output: within its rounding (2^-8 relative) of the float result.
      expect_close(dout.download().to(at::kFloat), which == 0 ? want1 : want2, 1.0 / 128, 1e-3,
                   point.str());
    }
  }
}

}  // namespace
}  // namespace ka::kernels
