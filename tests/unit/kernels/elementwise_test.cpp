// The CPU element-wise kernel against ATen (the oracle): every op, chains, broadcasting,
// strided and aliased operands, empty and odd sizes, every point of the tunable space, and an
// allocation-free hot path.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <ka/core/error.hpp>
#include <ka/core/fingerprint.hpp>
#include <ka/kernels/elementwise.hpp>
#include <ka/kernels/gemm.hpp>
#include <limits>
#include <string>
#include <vector>

#include "alloc_counter.hpp"
#include "pool_warmup.hpp"
#include "isa_paths.hpp"
#include "unary_references.hpp"
#include "torch_view.hpp"

namespace ka::kernels {
namespace {

using test::view_of;

LaunchConfig config(std::int64_t block_elems, std::int64_t threads) {
  LaunchConfig c;
  c.set("block_elems", block_elems).set("threads", threads);
  return c;
}

// out = program(inputs), each input broadcast to out's sizes.
void run(const EwProgram& p, const at::Tensor& out, const std::vector<at::Tensor>& inputs,
         const LaunchConfig& cfg = config(4096, 2)) {
  ElementwiseArgs args;
  args.out = view_of(out);
  args.program = p;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    args.inputs[i] = broadcast_view(view_of(inputs[i]), args.out.sizes.data(), args.out.ndim);
  }
  const Status st = elementwise_f32_cpu(args, cfg);
  ASSERT_TRUE(st.is_ok()) << st.reason();
}

void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  if (got.numel() == 0) return;
  EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-6, /*equal_nan=*/true))
      << what << ": max abs error " << (got - want).abs().max().item<float>();
}

EwProgram unary_program(EwOp op) {
  EwProgram p;
  p.set_result(p.unary(op, p.input(0)));
  return p;
}

EwProgram binary_program(EwOp op) {
  EwProgram p;
  p.set_result(p.binary(op, p.input(0), p.input(1)));
  return p;
}

// The ISA paths: the AVX-512 math (ew_math_avx512.cpp) and the portable loops.
using test::IsaGuard;
using test::runnable_isas;

TEST(ElementwiseCpu, EveryUnaryOpMatchesAtenOnEveryIsaPath) {
  at::manual_seed(1);
  // Odd sizes: the AVX-512 loops' masked tails.
  const at::Tensor x = at::randn({37, 129}) * 4;
  const auto& ops = test::unary_references();
  for (const std::string& isa : runnable_isas()) {
    const IsaGuard guard(isa);
    for (const auto& [op, ref] : ops) {
      at::Tensor out = at::empty_like(x);
      run(unary_program(op), out, {x});
      expect_close(out, ref(x), std::string(to_string(op)) + " [" + isa + "]");
      // Far tails: saturation to 0, 1, x and -0.
      const at::Tensor tails = at::tensor({-200.0F, -90.0F, -20.0F, 20.0F, 90.0F, 200.0F});
      if (op != EwOp::kExp) {
        at::Tensor tout = at::empty_like(tails);
        run(unary_program(op), tout, {tails});
        expect_close(tout, ref(tails), std::string(to_string(op)) + " tails [" + isa + "]");
      }
      // The reference evaluator agrees too.
      const float v = 0.75F;
      EXPECT_NEAR(unary_program(op).eval(&v), ref(at::full({1}, v)).item<float>(), 1e-6)
          << to_string(op);
    }
  }
}

TEST(ElementwiseCpu, ExpCoversItsWholeRangeOnEveryIsaPath) {
  const at::Tensor x = at::linspace(-110.0, 100.0, 100003);
  const at::Tensor special = at::tensor({NAN, INFINITY, -INFINITY, 0.0F, 88.72F, -87.5F, 88.8F, -103.0F});
  for (const std::string& isa : runnable_isas()) {
    const IsaGuard guard(isa);
    at::Tensor out = at::empty_like(x);
    run(unary_program(EwOp::kExp), out, {x});
    expect_close(out, at::exp(x), "exp [" + isa + "]");
    at::Tensor sout = at::empty_like(special);
    run(unary_program(EwOp::kExp), sout, {special});
    expect_close(sout, at::exp(special), "exp special values [" + isa + "]");
    // Within 2 ulp of the exact value (double) where the result is a normal float.
    const at::Tensor normal = at::linspace(-87.0, 88.0, 350001);
    at::Tensor nout = at::empty_like(normal);
    run(unary_program(EwOp::kExp), nout, {normal});
    const at::Tensor exact = at::exp(normal.to(at::kDouble));
    const at::Tensor ulp = at::exp2(at::floor(at::log2(exact)) - 23);
    const double worst = ((nout.to(at::kDouble) - exact).abs() / ulp).max().item<double>();
    EXPECT_LE(worst, 2.0) << "exp [" + isa + "]: worst error in ulp";
  }
}

// Note [No subnormal exp]: below ln(FLT_MIN) exp is 0, never a subnormal (whose every use
// costs a microcode assist on Intel cores), on every ISA path; above it, a normal float.
TEST(ElementwiseCpu, ExpNeverReturnsASubnormal) {
  const at::Tensor x = at::cat({at::linspace(-110.0, -80.0, 30001),
                                at::tensor({-1e4F, -INFINITY, -87.3366F, -87.3364F})});
  for (const std::string& isa : runnable_isas()) {
    const IsaGuard guard(isa);
    at::Tensor out = at::empty_like(x);
    run(unary_program(EwOp::kExp), out, {x});
    const at::Tensor subnormal = (out > 0) & (out < std::numeric_limits<float>::min());
    EXPECT_EQ(subnormal.sum().item<std::int64_t>(), 0) << "exp [" << isa << "]";
    EXPECT_TRUE((out.masked_select(x < -87.3366) == 0).all().item<bool>()) << "exp [" << isa << "]";
    EXPECT_TRUE((out.masked_select(x > -87.3364) >= std::numeric_limits<float>::min())
                    .all()
                    .item<bool>())
        << "exp [" << isa << "]";
  }
}

TEST(ElementwiseCpu, EveryBinaryOpMatchesAten) {
  at::manual_seed(2);
  const at::Tensor a = at::randn({41, 67});
  const at::Tensor b = at::randn({41, 67}) + 0.1;
  const std::vector<
      std::pair<EwOp, std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>>>
      ops = {
          {EwOp::kAdd, [](const at::Tensor& x, const at::Tensor& y) { return x + y; }},
          {EwOp::kSub, [](const at::Tensor& x, const at::Tensor& y) { return x - y; }},
          {EwOp::kMul, [](const at::Tensor& x, const at::Tensor& y) { return x * y; }},
          {EwOp::kDiv, [](const at::Tensor& x, const at::Tensor& y) { return x / y; }},
          {EwOp::kMax, [](const at::Tensor& x, const at::Tensor& y) { return at::maximum(x, y); }},
      };
  for (const auto& [op, ref] : ops) {
    at::Tensor out = at::empty_like(a);
    run(binary_program(op), out, {a, b});
    expect_close(out, ref(a, b), to_string(op));
  }
}

TEST(ElementwiseCpu, NanPropagatesThroughReluAndMax) {
  const at::Tensor x = at::tensor({NAN, -1.0F, 2.0F, NAN});
  const at::Tensor y = at::tensor({1.0F, NAN, 1.0F, NAN});
  at::Tensor out = at::empty_like(x);
  run(unary_program(EwOp::kRelu), out, {x});
  expect_close(out, at::relu(x), "relu NaN");
  run(binary_program(EwOp::kMax), out, {x, y});
  expect_close(out, at::maximum(x, y), "max NaN");
}

TEST(ElementwiseCpu, ChainMatchesAten) {
  at::manual_seed(3);
  const at::Tensor x = at::randn({33, 1000});
  const at::Tensor y = at::randn({33, 1000});
  EwProgram p;  // out = gelu(x + 0.5 * y) * sigmoid(y) - 1
  const int xr = p.input(0);
  const int yr = p.input(1);
  const int s = p.binary(EwOp::kAdd, xr, p.binary(EwOp::kMul, yr, p.scalar(0.5F)));
  const int gelu = p.unary(EwOp::kGelu, s);
  const int sig = p.unary(EwOp::kSigmoid, yr);
  const int g = p.binary(EwOp::kMul, gelu, sig);
  p.set_result(p.binary(EwOp::kSub, g, p.scalar(1.0F)));
  EXPECT_EQ(p.str(),
            "r0=in0 r1=in1 r2=0.5 r3=r1*r2 r4=r0+r3 r5=gelu(r4) r6=sigmoid(r1) r7=r5*r6 r8=1 "
            "r9=r7-r8 -> r9");
  at::Tensor out = at::empty_like(x);
  run(p, out, {x, y});
  expect_close(out, at::gelu(x + 0.5 * y) * at::sigmoid(y) - 1, "chain");
}

TEST(ElementwiseCpu, Broadcasting) {
  at::manual_seed(4);
  const at::Tensor x = at::randn({19, 301});
  const std::vector<at::Tensor> others = {at::randn({}), at::randn({301}), at::randn({19, 1}),
                                          at::randn({1, 301}), at::randn({1})};
  for (const auto& y : others) {
    at::Tensor out = at::empty_like(x);
    run(binary_program(EwOp::kMul), out, {x, y});
    expect_close(out, x * y, "broadcast " + std::to_string(y.dim()) + "-d");
    run(binary_program(EwOp::kSub), out, {y, x});  // the broadcast operand first
    expect_close(out, y - x, "broadcast first " + std::to_string(y.dim()) + "-d");
  }
  // A 0-d output.
  const at::Tensor a = at::randn({});
  const at::Tensor b = at::randn({});
  at::Tensor out0 = at::empty({});
  run(binary_program(EwOp::kAdd), out0, {a, b});
  expect_close(out0, a + b, "0-d");
  // Rows longer than a chunk: chunks inside a row read the broadcast row in place, chunks
  // across two rows gather it; a 3-D operand broadcast along the middle dim, in a chain.
  const at::Tensor wide = at::randn({7, 1000});
  const at::Tensor row = at::randn({1000});
  at::Tensor out_wide = at::empty_like(wide);
  run(binary_program(EwOp::kAdd), out_wide, {wide, row});
  expect_close(out_wide, wide + row, "rows of 1000 + a row");
  const at::Tensor cube = at::randn({3, 5, 700});
  const at::Tensor plane = at::randn({3, 1, 700});
  EwProgram chain;  // gelu_tanh(x + b) * 2
  const int biased = chain.binary(EwOp::kAdd, chain.input(0), chain.input(1));
  chain.set_result(
      chain.binary(EwOp::kMul, chain.unary(EwOp::kGeluTanh, biased), chain.scalar(2.0F)));
  at::Tensor out_cube = at::empty_like(cube);
  run(chain, out_cube, {cube, plane});
  expect_close(out_cube, at::gelu(cube + plane, "tanh") * 2, "3-d, broadcast along dim 1");
  // Column broadcast into a 3-D output.
  const at::Tensor z = at::randn({4, 5, 67});
  const at::Tensor col = at::randn({4, 5, 1});
  at::Tensor out3 = at::empty_like(z);
  run(binary_program(EwOp::kAdd), out3, {z, col});
  expect_close(out3, z + col, "3-d column");
}

TEST(ElementwiseCpu, NonContiguousOperands) {
  at::manual_seed(5);
  const at::Tensor xt = at::randn({301, 67}).t();                 // transposed input
  const at::Tensor y = at::randn({67, 602}).slice(1, 0, 602, 2);  // strided input
  at::Tensor out = at::empty({67, 301});
  run(binary_program(EwOp::kAdd), out, {xt, y});
  expect_close(out, xt + y, "transposed + strided");
  at::Tensor out_t = at::empty({301, 67}).t();  // transposed output
  run(binary_program(EwOp::kMax), out_t, {xt, y});
  expect_close(out_t, at::maximum(xt, y), "transposed out");
  const at::Tensor perm = at::randn({5, 6, 7}).permute({2, 0, 1});
  at::Tensor out_p = at::empty({7, 5, 6});
  run(unary_program(EwOp::kTanh), out_p, {perm}, config(4096, 1));
  expect_close(out_p, at::tanh(perm), "permuted");
}

TEST(ElementwiseCpu, EmptyOddAndTailSizes) {
  at::manual_seed(6);
  for (const std::int64_t n : {0, 1, 7, 255, 256, 257, 4095, 4097, 65537}) {
    const at::Tensor x = at::randn({n});
    const at::Tensor y = at::randn({n});
    at::Tensor out = at::full({n}, NAN);
    run(binary_program(EwOp::kAdd), out, {x, y});
    expect_close(out, x + y, "n=" + std::to_string(n));
  }
  at::Tensor e = at::empty({0, 5});
  run(unary_program(EwOp::kRelu), e, {at::empty({0, 5})});
}

TEST(ElementwiseCpu, InPlaceAliasing) {
  at::manual_seed(7);
  at::Tensor x = at::randn({123, 45});
  const at::Tensor y = at::randn({123, 45});
  const at::Tensor want = x + y;
  run(binary_program(EwOp::kAdd), x, {x, y});
  expect_close(x, want, "x += y");
  at::Tensor z = at::randn({3000});
  const at::Tensor relu_want = at::relu(z);
  run(unary_program(EwOp::kRelu), z, {z});
  expect_close(z, relu_want, "relu_");
  at::Tensor zt = at::randn({40, 50}).t();
  const at::Tensor g_want = at::gelu(zt);
  run(unary_program(EwOp::kGelu), zt, {zt});
  expect_close(zt, g_want, "gelu_ on a transposed view");
}

// stream=1 writes out with non-temporal stores (Note [Streaming stores]): out at offsets that
// are not 16-byte aligned (the head and tail go through ordinary stores), in place, a chain,
// and a strided out (which ignores it) all match ATen, and nothing outside out is written.
TEST(ElementwiseCpu, StreamingStoresMatchAten) {
  at::manual_seed(9);
  LaunchConfig streamed = config(4096, 2);
  streamed.set("stream", 1);
  for (const std::int64_t n : {1, 5, 4097, 100003}) {
    const at::Tensor x = at::randn({n + 3}).slice(0, 1, n + 1);
    const at::Tensor y = at::randn({n});
    const at::Tensor out_base = at::full({n + 6}, NAN);
    at::Tensor out = out_base.slice(0, 3, n + 3);  // 12 bytes past an aligned start
    run(binary_program(EwOp::kAdd), out, {x, y}, streamed);
    expect_close(out, x + y, "streamed add n=" + std::to_string(n));
    EXPECT_TRUE(out_base.slice(0, 0, 3).isnan().all().item<bool>()) << "wrote before out";
    EXPECT_TRUE(out_base.slice(0, n + 3, n + 6).isnan().all().item<bool>()) << "wrote after out";
  }
  at::Tensor z = at::randn({10000});
  const at::Tensor y = at::randn({10000});
  const at::Tensor want = z * y;
  run(binary_program(EwOp::kMul), z, {z, y}, streamed);
  expect_close(z, want, "streamed z *= y");
  const at::Tensor x = at::randn({33, 1000});
  EwProgram p;  // out = silu(x * 2 + y)
  p.set_result(p.unary(EwOp::kSilu, p.binary(EwOp::kAdd, p.binary(EwOp::kMul, p.input(0), p.scalar(2.0F)), p.input(1))));
  const at::Tensor y2 = at::randn({33, 1000});
  at::Tensor out = at::empty_like(x);
  run(p, out, {x, y2}, streamed);
  expect_close(out, at::silu(x * 2 + y2), "streamed chain");
  at::Tensor zt = at::randn({40, 50}).t();
  const at::Tensor relu_want = at::relu(zt);
  run(unary_program(EwOp::kRelu), zt, {zt}, streamed);
  expect_close(zt, relu_want, "streamed relu_ on a transposed view");
}

// One op with a scalar operand (x * 0.5 from aten::mul.Scalar, 0.5 - x, x / a one-element
// tensor broadcast) takes the single-op path in 4 KiB pieces, streamed or not: every order of
// the operands, lengths around a piece and a block, matches ATen.
TEST(ElementwiseCpu, ScalarOperandsMatchAtenStreamedOrNot) {
  at::manual_seed(12);
  for (const std::string& isa : runnable_isas()) {
    const IsaGuard guard(isa);
    for (const std::int64_t stream : {0, 1}) {
      LaunchConfig cfg = config(4096, 2);
      cfg.set("stream", stream);
      for (const std::int64_t n : {3, 1023, 1025, 4096, 10007}) {
        const std::string what =
            isa + " n=" + std::to_string(n) + " stream=" + std::to_string(stream);
        const at::Tensor x = at::randn({n});
        at::Tensor out = at::empty({n});
        EwProgram times_half;
        times_half.set_result(
            times_half.binary(EwOp::kMul, times_half.input(0), times_half.scalar(0.5F)));
        run(times_half, out, {x}, cfg);
        expect_close(out, x * 0.5, "x * 0.5 " + what);
        EwProgram half_minus;
        half_minus.set_result(
            half_minus.binary(EwOp::kSub, half_minus.scalar(0.5F), half_minus.input(0)));
        run(half_minus, out, {x}, cfg);
        expect_close(out, 0.5 - x, "0.5 - x " + what);
        const at::Tensor s = at::full({1}, 3.0F);
        run(binary_program(EwOp::kDiv), out, {x, s}, cfg);
        expect_close(out, x / s, "x / s[1] " + what);
        run(binary_program(EwOp::kMax), out, {s, x}, cfg);
        expect_close(out, at::maximum(s, x), "maximum(s[1], x) " + what);
      }
    }
  }
}

// One op streamed (on AVX-512 computed and stored in one pass, else through 4 KiB pieces), on
// every ISA path: every unary and binary op, into an out 12 bytes past a line, writing
// nothing outside it; in place for a binary op.
TEST(ElementwiseCpu, StreamedSingleOpsOnEveryIsaPath) {
  at::manual_seed(15);
  LaunchConfig streamed = config(4096, 2);
  streamed.set("stream", 1);
  const auto& unary = test::unary_references();
  using BinaryRef = std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>;
  const std::vector<std::pair<EwOp, BinaryRef>> binary = {
      {EwOp::kAdd, [](const at::Tensor& a, const at::Tensor& b) { return a + b; }},
      {EwOp::kSub, [](const at::Tensor& a, const at::Tensor& b) { return a - b; }},
      {EwOp::kMul, [](const at::Tensor& a, const at::Tensor& b) { return a * b; }},
      {EwOp::kDiv, [](const at::Tensor& a, const at::Tensor& b) { return a / b; }},
      {EwOp::kMax, [](const at::Tensor& a, const at::Tensor& b) { return at::maximum(a, b); }},
  };
  for (const std::string& isa : runnable_isas()) {
    const IsaGuard guard(isa);
    for (const std::int64_t n : {5, 33, 1000, 4097}) {
      at::Tensor x = at::randn({n}) * 3;
      x[n / 2] = NAN;
      const at::Tensor y = at::randn({n});
      const at::Tensor base = at::full({n + 6}, NAN);
      at::Tensor out = base.slice(0, 3, n + 3);
      const auto check = [&](const at::Tensor& want, const std::string& what) {
        expect_close(out, want, what + " n=" + std::to_string(n) + " [" + isa + "]");
        EXPECT_TRUE(base.slice(0, 0, 3).isnan().all().item<bool>()) << what << ": wrote before out";
        EXPECT_TRUE(base.slice(0, n + 3).isnan().all().item<bool>()) << what << ": wrote after out";
      };
      for (const auto& [op, ref] : unary) {
        run(unary_program(op), out, {x}, streamed);
        check(ref(x), to_string(op));
      }
      for (const auto& [op, ref] : binary) {
        run(binary_program(op), out, {x, y}, streamed);
        check(ref(x, y), to_string(op));
      }
      at::Tensor z = y.clone();
      run(binary_program(EwOp::kSub), z, {z, x}, streamed);
      expect_close(z, y - x, "streamed z -= x [" + isa + "]");
    }
  }
}

// Chains of every op with an AVX-512 vector form (evaluated there in vector groups, Note
// [Fused vector groups]) on every ISA path: a bias broadcast over rows, a per-row scalar, a
// 0-d input and a constant; rows shorter and longer than a group, blocks that start mid-row,
// streamed or not, into an out 12 bytes past a line (nothing outside it written); in place.
TEST(ElementwiseCpu, FusedChainsOnEveryIsaPath) {
  at::manual_seed(16);
  EwProgram p;  // gelu_tanh(max(silu(x + b) * sigmoid(r) - c, -exp(r * 0.25) / s)) + relu(x - 0.5)
  const int x = p.input(0);
  const int r = p.input(2);
  const int silu = p.unary(EwOp::kSilu, p.binary(EwOp::kAdd, x, p.input(1)));
  const int t5 =
      p.binary(EwOp::kSub, p.binary(EwOp::kMul, silu, p.unary(EwOp::kSigmoid, r)), p.input(3));
  const int e = p.unary(EwOp::kExp, p.binary(EwOp::kMul, r, p.scalar(0.25F)));
  const int t8 = p.unary(EwOp::kNeg, e);
  const int t9 = p.binary(EwOp::kMax, t5, p.binary(EwOp::kDiv, t8, p.input(4)));
  const int t7 = p.unary(EwOp::kRelu, p.binary(EwOp::kSub, x, p.scalar(0.5F)));
  p.set_result(p.binary(EwOp::kAdd, p.unary(EwOp::kGeluTanh, t9), t7));
  // A linear chain (Note [Linear chains]): the value as either operand, constants (a scalar, a
  // per-row value, a 0-d input), a row bias and an input run as the other; rows of 2100 take
  // the non-temporal prefetch of the runs read once (Note [Re-read rows]).
  // gelu_tanh(max(r / (sigmoid(((0.5 - x) + col) * b) + 2), s))
  EwProgram chain;
  {
    EwProgram& q = chain;
    const int v = q.binary(EwOp::kMul, q.binary(EwOp::kAdd, q.binary(EwOp::kSub, q.scalar(0.5F),
                                                                     q.input(0)),
                                                q.input(3)),
                           q.input(1));
    const int d = q.binary(EwOp::kDiv, q.input(2),
                           q.binary(EwOp::kAdd, q.unary(EwOp::kSigmoid, v), q.scalar(2.0F)));
    q.set_result(q.unary(EwOp::kGeluTanh, q.binary(EwOp::kMax, d, q.input(4))));
  }
  EwProgram in_place;  // z = gelu_tanh(z + b) * 2 + z
  const int z = in_place.input(0);
  const int g = in_place.unary(EwOp::kGeluTanh, in_place.binary(EwOp::kAdd, z, in_place.input(1)));
  in_place.set_result(in_place.binary(
      EwOp::kAdd, in_place.binary(EwOp::kMul, g, in_place.scalar(2.0F)), z));
  for (const std::string& isa : runnable_isas()) {
    const IsaGuard guard(isa);
    for (const auto& [rows, cols] : std::vector<std::pair<std::int64_t, std::int64_t>>{
             {7, 33}, {3, 64}, {5, 100}, {2, 1000}, {1, 4100}, {3, 2100}}) {
      for (const std::int64_t stream : {0, 1}) {
        for (const std::int64_t block : {1000, 4096}) {
          LaunchConfig cfg = config(block, 2);
          cfg.set("stream", stream);
          const std::string what = isa + " " + std::to_string(rows) + "x" + std::to_string(cols) +
                                   " stream=" + std::to_string(stream) +
                                   " block=" + std::to_string(block);
          const at::Tensor xt = at::randn({rows, cols}) * 2;
          const at::Tensor bias = at::randn({cols});
          const at::Tensor res = at::randn({rows, cols});
          at::Tensor col = at::randn({rows, 1});
          col[rows / 2][0] = NAN;  // max's first operand NaN along a row
          const at::Tensor s = at::full({}, 1.5F);
          const std::int64_t n = rows * cols;
          const at::Tensor base = at::full({n + 6}, NAN);
          at::Tensor out = base.slice(0, 3, n + 3).view({rows, cols});
          run(p, out, {xt, bias, res, col, s}, cfg);
          const at::Tensor want =
              at::gelu(at::maximum(at::silu(xt + bias) * at::sigmoid(res) - col,
                                   -at::exp(res * 0.25) / s),
                       "tanh") +
              at::relu(xt - 0.5);
          expect_close(out, want, "chain " + what);
          EXPECT_TRUE(base.slice(0, 0, 3).isnan().all().item<bool>()) << what << ": wrote before";
          EXPECT_TRUE(base.slice(0, n + 3).isnan().all().item<bool>()) << what << ": wrote after";
          at::Tensor chained = base.slice(0, 3, n + 3).view({rows, cols});
          chained.fill_(NAN);
          run(chain, chained, {xt, bias, res, col, s}, cfg);
          expect_close(chained,
                       at::gelu(at::maximum(res / (at::sigmoid(((0.5 - xt) + col) * bias) + 2), s),
                                "tanh"),
                       "linear chain " + what);
          EXPECT_TRUE(base.slice(0, 0, 3).isnan().all().item<bool>()) << what << ": wrote before";
          EXPECT_TRUE(base.slice(0, n + 3).isnan().all().item<bool>()) << what << ": wrote after";
          at::Tensor zt = res.clone();
          run(in_place, zt, {zt, bias}, cfg);
          expect_close(zt, at::gelu(res + bias, "tanh") * 2 + res, "in place " + what);
        }
      }
    }
  }
}

TEST(ElementwiseCpu, DefaultStreamsOnlyOutputsBeyondTheLastLevelCache) {
  const KernelDescriptor& d = elementwise_f32_cpu_descriptor();
  const std::int64_t l3 = cpu_fingerprint().l3_bytes;
  const std::int64_t llc = l3 > 0 ? l3 : std::int64_t{32} << 20;
  const auto key = [](const char* op, std::int64_t n) {
    return ShapeKey(op, {{DType::kFloat32, {n}, true}});
  };
  EXPECT_EQ(d.default_config(key("aten::relu", llc / 4 * 2)).get_or("stream", -1), 1);
  EXPECT_EQ(d.default_config(key("aten::relu", llc / 4 / 2)).get_or("stream", -1), 0);
  EXPECT_EQ(d.default_config(key("aten::relu", 1000)).get_or("stream", -1), 0);
  EXPECT_EQ(d.default_config(key("aten::mul.Scalar", llc / 4 * 2)).get_or("stream", -1), 1);
  EXPECT_EQ(d.default_config(key("aten::add.Scalar", llc / 4 * 2)).get_or("stream", -1), 1);
  // Transcendental ops and chains are bound by their arithmetic on one core: streamed only on
  // two or more threads, where AVX-512 computes and streams them from registers.
  set_cpu_thread_limit(1);
  for (const std::string& isa : runnable_isas()) {
    const IsaGuard guard(isa);
    EXPECT_EQ(d.default_config(key("aten::gelu", llc / 4 * 2)).get_or("stream", -1), 0) << isa;
    EXPECT_EQ(d.default_config(key("aten::relu", llc / 4 * 2)).get_or("stream", -1), 1) << isa;
  }
  set_cpu_thread_limit(2);
  const bool two = cpu_thread_limit() == 2;  // not on a one-core machine
  for (const std::string& isa : runnable_isas()) {
    const IsaGuard guard(isa);
    const LaunchConfig c = d.default_config(key("aten::gelu", llc / 4 * 2));
    EXPECT_EQ(c.get_or("threads", -1), two ? 2 : 1) << isa;
    EXPECT_EQ(c.get_or("stream", -1), two && isa == "avx512" ? 1 : 0) << isa;
    EXPECT_EQ(d.default_config(key("aten::gelu", llc / 4 / 2)).get_or("stream", -1), 0) << isa;
  }
  set_cpu_thread_limit(0);
}

TEST(ElementwiseCpu, EveryPointOfTheSpaceRuns) {
  at::manual_seed(8);
  const at::Tensor x = at::randn({100003});
  const at::Tensor y = at::randn({100003});
  const KernelDescriptor& d = elementwise_f32_cpu_descriptor();
  const ShapeKey key("aten::mul.Tensor",
                     {{DType::kFloat32, {100003}, true}, {DType::kFloat32, {100003}, true}});
  const auto points = d.space.enumerate();
  ASSERT_FALSE(points.empty());
  for (const auto& point : points) {
    const LaunchConfig full = d.complete(key, point);
    ASSERT_TRUE(d.can_run(key, full).is_ok()) << full.str();
    at::Tensor out = at::empty_like(x);
    run(binary_program(EwOp::kMul), out, {x, y}, full);
    expect_close(out, x * y, full.str());
  }
}

TEST(ElementwiseCpu, DescriptorDefaultsAndRefusals) {
  const KernelDescriptor& d = elementwise_f32_cpu_descriptor();
  EXPECT_EQ(d.name, "ew_chain_f32");
  const ShapeKey tiny("aten::relu", {{DType::kFloat32, {1}, true}});
  const LaunchConfig small = d.default_config(tiny);
  EXPECT_EQ(small.get_or("threads", 0), 1);
  EXPECT_EQ(small.grid.volume(), 1);
  EXPECT_TRUE(d.can_run(tiny, small).is_ok());
  const ShapeKey big("aten::add.Tensor",
                     {{DType::kFloat32, {4096, 4096}, true}, {DType::kFloat32, {4096}, true}});
  const LaunchConfig large = d.default_config(big);
  EXPECT_EQ(large.get_or("threads", 0), d.space.params()[1].candidates.back());
  EXPECT_TRUE(d.can_run(big, large).is_ok()) << large.str();
  EXPECT_DOUBLE_EQ(d.byte_count(big), 4.0 * (2.0 * 4096 * 4096 + 4096));
  // Refusals carry a reason.
  LaunchConfig missing;
  missing.set("threads", 1);
  EXPECT_FALSE(d.can_run(tiny, missing).reason().empty());
  EXPECT_FALSE(d.can_run(tiny, config(4096, 0)).is_ok());
  LaunchConfig wrong_grid = d.complete(big, config(4096, 1));
  wrong_grid.grid.x += 1;
  EXPECT_NE(d.can_run(big, wrong_grid).reason().find("grid"), std::string::npos);
  const ShapeKey f64("aten::relu", {{DType::kFloat64, {4}, true}});
  EXPECT_FALSE(d.can_run(f64, small).is_ok());
  // The kernel itself refuses a bad config as a value.
  const at::Tensor x = at::randn({10});
  ElementwiseArgs args;
  args.out = view_of(x);
  args.inputs[0] = view_of(x);
  args.program = unary_program(EwOp::kNeg);
  EXPECT_FALSE(elementwise_f32_cpu(args, config(4096, 0)).is_ok());
  // A call takes a completed config whatever numel its key counted (a fused chain's key need
  // not name every tensor), but not one whose block disagrees with block_elems.
  EXPECT_TRUE(elementwise_f32_cpu(args, wrong_grid).is_ok());
  LaunchConfig wrong_block = wrong_grid;
  wrong_block.block.x = 8192;
  EXPECT_FALSE(elementwise_f32_cpu(args, wrong_block).is_ok());
}

TEST(ElementwiseCpu, BadArgumentsThrow) {
  const at::Tensor x = at::randn({4, 5});
  const at::Tensor y = at::randn({5, 4});
  ElementwiseArgs args;
  args.out = view_of(at::empty({4, 5}));
  args.inputs[0] = view_of(y);
  args.program = unary_program(EwOp::kNeg);
  EXPECT_THROW((void)elementwise_f32_cpu(args, config(4096, 1)), ValueError);
  // Partial overlap of out and an input.
  const at::Tensor buf = at::randn({30});
  args.out = view_of(buf.slice(0, 0, 20));
  args.inputs[0] = view_of(buf.slice(0, 5, 25));
  EXPECT_THROW((void)elementwise_f32_cpu(args, config(4096, 1)), ValueError);
  // A missing input.
  args.out = view_of(at::empty({4, 5}));
  args.inputs[0] = view_of(x);
  args.program = binary_program(EwOp::kAdd);
  EXPECT_THROW((void)elementwise_f32_cpu(args, config(4096, 1)), ValueError);
  // broadcast_view refuses incompatible shapes.
  const std::int64_t sizes[] = {4, 5};
  EXPECT_THROW((void)broadcast_view(view_of(at::randn({3})), sizes, 2), ValueError);
  // The builders refuse past their limits.
  EwProgram p;
  for (int i = 0; i < EwProgram::kMaxInstrs; ++i) p.scalar(1.0F);
  EXPECT_THROW(p.scalar(2.0F), ValueError);
  EwProgram q;
  EXPECT_THROW(q.input(EwProgram::kMaxInputs), ValueError);
  EXPECT_THROW(q.unary(EwOp::kAdd, 0), ValueError);
}

TEST(ElementwiseCpu, WarmCallsAllocateNothing) {
  for (const std::int64_t n : {1, 100000}) {
    const at::Tensor x = at::randn({n});
    const at::Tensor y = at::randn({n});
    at::Tensor out = at::empty({n});
    ElementwiseArgs args;
    args.out = view_of(out);
    args.inputs[0] = view_of(x);
    args.inputs[1] = view_of(y);
    args.program = binary_program(EwOp::kAdd);
    const LaunchConfig cfg = config(n == 1 ? 32768 : 4096, 2);
    test::on_each_pool_thread(2, [&] { ASSERT_TRUE(elementwise_f32_cpu(args, cfg).is_ok()); });
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(elementwise_f32_cpu(args, cfg).is_ok());
    const long before = ka_test_allocation_count();
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(elementwise_f32_cpu(args, cfg).is_ok());
    EXPECT_EQ(ka_test_allocation_count() - before, 0) << "n=" << n;
  }
}

}  // namespace
}  // namespace ka::kernels
