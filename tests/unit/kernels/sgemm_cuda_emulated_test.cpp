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
#include <vector>

// After ATen and gtest: it redefines __shared__ and defines threadIdx & co. for the kernels.
#include "simt_host.hpp"

#include "gemm_cuda_kernels.cuh"
#include "gemm_internal.hpp"

namespace ka::kernels::cuda_detail {
namespace {

struct Variant {
  int bm, bn, bk, tm, tn, vec;
  void (*kernel)(SgemmOperands);
  std::string name() const {
    return std::to_string(bm) + "x" + std::to_string(bn) + "x" + std::to_string(bk) + " thread " +
           std::to_string(tm) + "x" + std::to_string(tn) + " vec " + std::to_string(vec);
  }
};

template <int BM, int BN, int BK, int TM, int TN, int VEC>
Variant variant() {
  if constexpr (VEC == 4) {
    return {BM, BN, BK, TM, TN, VEC, &sgemm_vec4<BM, BN, BK, TM, TN>};
  } else {
    return {BM, BN, BK, TM, TN, VEC, &sgemm_tiled<BM, BN, BK, TM, TN>};
  }
}

std::vector<Variant> variants() {
#define KA_SGEMM_VARIANT(BM, BN, BK, TM, TN, VEC) variant<BM, BN, BK, TM, TN, VEC>(),
  return {KA_CUDA_SGEMM_VARIANTS(KA_SGEMM_VARIANT)};
#undef KA_SGEMM_VARIANT
}

// What gemm_cuda.cu's launcher does, on the emulated grid: the output's tiles, the batch in z.
void run(const Variant& v, SgemmOperands op, long long batch) {
  op.vec_a = float4_rows(op.a, op.sa0, op.sa1, op.batch_a);
  op.vec_b = float4_rows(op.b, op.sb0, op.sb1, op.batch_b);
  const dim3 grid(static_cast<unsigned>((op.n + v.bn - 1) / v.bn),
                  static_cast<unsigned>((op.m + v.bm - 1) / v.bm), static_cast<unsigned>(batch));
  const dim3 block(static_cast<unsigned>((v.bm / v.tm) * (v.bn / v.tn)));
  test::simt::launch(grid, block, [&] { v.kernel(op); });
}

// The operands of C = act(alpha * A @ B + beta * bias) over torch tensors (2-D, or 3-D with
// the batch first), any strides.
SgemmOperands operands(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  const bool batched = a.dim() == 3;
  const int r = batched ? 1 : 0;
  SgemmOperands op{};
  op.m = a.size(r);
  op.k = a.size(r + 1);
  op.n = b.size(r + 1);
  op.a = a.data_ptr<float>();
  op.sa0 = a.stride(r);
  op.sa1 = a.stride(r + 1);
  op.b = b.data_ptr<float>();
  op.sb0 = b.stride(r);
  op.sb1 = b.stride(r + 1);
  op.c = c.data_ptr<float>();
  op.sc0 = c.stride(r);
  op.sc1 = c.stride(r + 1);
  op.alpha = 1.0F;
  op.epilogue = Epilogue::kNone;
  if (batched) {
    op.batch_a = a.stride(0);
    op.batch_b = b.stride(0);
    op.batch_c = c.stride(0);
  }
  return op;
}

void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  const double scale = std::max(1.0, want.abs().max().item<double>());
  const double err = (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
  EXPECT_LE(err, 1e-5 * scale) << what;
}

TEST(SgemmCudaEmulated, EveryVariantMatchesLibtorch) {
  at::manual_seed(7);
  for (const Variant& v : variants()) {
    // Ragged in every dim, no float4 layout (k and n not multiples of 4).
    {
      const at::Tensor a = at::randn({37, 29});
      const at::Tensor b = at::randn({29, 45});
      at::Tensor c = at::full({37, 45}, NAN);
      run(v, operands(a, b, c), 1);
      expect_close(c, at::mm(a, b), v.name() + ": 37x29 @ 29x45");
    }
    // float4 rows for both operands, tiles ragged in m and n, several K slices.
    {
      const at::Tensor a = at::randn({70, 40});
      const at::Tensor b = at::randn({40, 132});
      at::Tensor c = at::full({70, 132}, NAN);
      SgemmOperands op = operands(a, b, c);
      EXPECT_TRUE(float4_rows(op.a, op.sa0, op.sa1, 0) && float4_rows(op.b, op.sb0, op.sb1, 0));
      run(v, op, 1);
      expect_close(c, at::mm(a, b), v.name() + ": 70x40 @ 40x132");
    }
  }
}

TEST(SgemmCudaEmulated, TransposedOperandsBiasScalesAndActivations) {
  at::manual_seed(8);
  const at::Tensor at_ = at::randn({24, 50});  // A = at_^T: [50, 24], unit stride along m
  const at::Tensor b = at::randn({24, 36});
  const at::Tensor bt = at::randn({36, 24});   // B = bt^T: [24, 36], unit stride along k
  const at::Tensor bias = at::randn({36});
  for (const Variant& v : variants()) {
    at::Tensor c = at::full({50, 36}, NAN);
    SgemmOperands op = operands(at_.t(), b, c);
    op.bias = bias.data_ptr<float>();
    op.bs0 = 0;
    op.bs1 = 1;
    op.alpha = 0.5F;
    op.beta = -2.0F;
    op.epilogue = Epilogue::kGeluTanh;
    run(v, op, 1);
    expect_close(c, at::gelu(at::addmm(bias, at_.t(), b, -2.0, 0.5), "tanh"),
                 v.name() + ": gelu_tanh(-2 bias + 0.5 A^T B)");

    at::Tensor d = at::full({50, 36}, NAN);
    SgemmOperands q = operands(at_.t(), bt.t(), d);
    q.epilogue = Epilogue::kRelu;
    run(v, q, 1);
    expect_close(d, at::relu(at::mm(at_.t(), bt.t())), v.name() + ": relu(A^T B^T)");
  }
}

TEST(SgemmCudaEmulated, BatchesAndAnUnalignedStart) {
  at::manual_seed(9);
  const at::Tensor a = at::randn({3, 33, 24});
  const at::Tensor b = at::randn({3, 24, 20});
  // One float past a 16-byte boundary: float4_rows refuses it, the scalar loads serve.
  const at::Tensor storage = at::randn({1 + 24 * 20});
  const at::Tensor b_off = storage.slice(0, 1).view({24, 20});
  for (const Variant& v : variants()) {
    at::Tensor c = at::full({3, 33, 20}, NAN);
    run(v, operands(a, b, c), 3);
    expect_close(c, at::bmm(a, b), v.name() + ": bmm 3 x (33x24 @ 24x20)");

    const at::Tensor a2 = a[1];
    at::Tensor c2 = at::full({33, 20}, NAN);
    SgemmOperands op = operands(a2, b_off, c2);
    EXPECT_FALSE(float4_rows(op.b, op.sb0, op.sb1, 0));
    run(v, op, 1);
    expect_close(c2, at::mm(a2, b_off), v.name() + ": B at an odd float offset");
  }
}

}  // namespace
}  // namespace ka::kernels::cuda_detail
