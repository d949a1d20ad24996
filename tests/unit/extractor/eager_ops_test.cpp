// Every operator ka extracts, run eagerly, against libtorch: odd shapes, broadcasting,
// non-contiguous inputs, 0-size tensors.
#include <ka/core/error.hpp>
#include <ka/extractor/extractor.hpp>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ka::extractor {
namespace {

at::Tensor run(const char* signature, std::vector<c10::IValue> args) {
  Extractor& ex = Extractor::global();
  return ex.call(ex.resolve(signature), args.data(), args.size()).toTensor();
}

void expect_close(const at::Tensor& got, const at::Tensor& want, double rtol = 1e-5,
                  double atol = 1e-5) {
  ASSERT_EQ(got.sizes(), want.sizes());
  if (want.numel() == 0) return;
  EXPECT_TRUE(at::allclose(got, want, rtol, atol))
      << "max abs diff " << (got - want).abs().max().item<float>();
}

// Inputs in several layouts: contiguous, transposed view, broadcast from a row, a scalar.
struct Layout {
  const char* name;
  at::Tensor a;
  at::Tensor b;
};

std::vector<Layout> layouts() {
  at::manual_seed(3);
  return {
      {"contiguous", at::randn({7, 33}), at::randn({7, 33})},
      {"transposed", at::randn({33, 7}).t(), at::randn({7, 33})},
      {"row broadcast", at::randn({7, 33}), at::randn({33})},
      {"column broadcast", at::randn({7, 1}), at::randn({1, 33})},
      {"0-d other", at::randn({5, 3, 9}), at::randn({})},
      {"sliced", at::randn({7, 66}).slice(1, 0, 66, 2), at::randn({7, 33})},
      {"empty", at::randn({0, 33}), at::randn({33})},
      {"large", at::randn({300, 1000}), at::randn({300, 1000})},
  };
}

TEST(EagerOps, BinaryOpsMatchLibtorch) {
  for (const Layout& l : layouts()) {
    SCOPED_TRACE(l.name);
    expect_close(run("aten::add.Tensor", {l.a, l.b, 1}), at::add(l.a, l.b));
    expect_close(run("aten::add.Tensor", {l.a, l.b, 2.5}), at::add(l.a, l.b, 2.5));
    expect_close(run("aten::sub.Tensor", {l.a, l.b, 0.5}), at::sub(l.a, l.b, 0.5));
    expect_close(run("aten::mul.Tensor", {l.a, l.b}), at::mul(l.a, l.b));
    const at::Tensor divisor = l.b.abs() + 0.5;
    expect_close(run("aten::div.Tensor", {l.a, divisor}), at::div(l.a, divisor));
    expect_close(run("aten::add.Scalar", {l.a, 3, 2}), at::add(l.a, 3, 2));
    expect_close(run("aten::mul.Scalar", {l.a, -0.25}), at::mul(l.a, -0.25));
  }
}

TEST(EagerOps, UnaryOpsMatchLibtorch) {
  for (const Layout& l : layouts()) {
    SCOPED_TRACE(l.name);
    const at::Tensor x = l.a * 4;
    expect_close(run("aten::relu", {x}), at::relu(x));
    expect_close(run("aten::gelu", {x, std::string("none")}), at::gelu(x));
    expect_close(run("aten::gelu", {x, std::string("tanh")}), at::gelu(x, "tanh"));
    expect_close(run("aten::sigmoid", {x}), at::sigmoid(x));
    expect_close(run("aten::silu", {x}), at::silu(x));
  }
}

TEST(EagerOps, RepeatedCallsReusePlansWithFreshData) {
  // Same metadata, different data: a repeat must read this call's tensors (Note [Eager plans]).
  for (int i = 0; i < 3; ++i) {
    const at::Tensor a = at::randn({5, 7});
    const at::Tensor b = at::randn({7});
    expect_close(run("aten::mul.Tensor", {a, b}), a * b);
    expect_close(run("aten::mul.Tensor", {b, a}), b * a);
    expect_close(run("aten::add.Tensor", {a, a, 1}), a + a);  // aliased arguments
    const at::Tensor c = at::randn({5, 7});
    expect_close(run("aten::add.Tensor", {a, c, 1}), a + c);  // same shapes, not aliased
    expect_close(run("aten::add.Tensor", {a, c, 2}), a + 2 * c);  // another alpha
    expect_close(run("aten::relu", {a.t()}), at::relu(a.t()));  // strides are part of the plan
    expect_close(run("aten::relu", {c}), at::relu(c));
  }
}

TEST(EagerOps, A0DimOperandOfAnotherTypeIsAScalarKeyedByItsValue) {
  // A traced model's Python numbers: 0-dim float64 and int64 tensors (Note [0-dim operands as
  // scalars]). The result stays float32, as ATen's; a repeat with another value must not
  // reuse the last value (Note [Eager plans]).
  const at::Tensor x = at::randn({6, 11});
  for (const double v : {2.0, -0.375, 3.0}) {
    SCOPED_TRACE(v);
    const at::Tensor d = at::scalar_tensor(v, at::kDouble);
    const at::Tensor i = at::scalar_tensor(static_cast<std::int64_t>(v), at::kLong);
    for (const at::Tensor& t : {d, i}) {
      const at::Tensor got = run("aten::mul.Tensor", {x, t});
      EXPECT_EQ(got.scalar_type(), at::kFloat);
      expect_close(got, at::mul(x, t));
      expect_close(run("aten::div.Tensor", {x, t}), at::div(x, t));
      expect_close(run("aten::add.Tensor", {x, t, 2}), at::add(x, t, 2));
      expect_close(run("aten::sub.Tensor", {x, t, 1}), at::sub(x, t, 1));
    }
  }
  // Two 0-dim operands promote to float64 in ATen: ka refuses rather than return float32.
  EXPECT_THROW(run("aten::mul.Tensor", {at::scalar_tensor(1.5), at::scalar_tensor(2.0, at::kDouble)}),
               NotImplementedError);
}

TEST(EagerOps, InPlaceOpsWriteSelfAndReturnIt) {
  at::Tensor x = at::randn({9, 17});
  const at::Tensor y = at::randn({17});
  const at::Tensor want = x + 2 * y;
  const at::Tensor got = run("aten::add_.Tensor", {x, y, 2});
  EXPECT_TRUE(got.is_same(x));
  expect_close(x, want);
  const at::Tensor want_mul = x * y;
  run("aten::mul_.Tensor", {x, y});
  expect_close(x, want_mul);
  const at::Tensor want_relu = at::relu(x);
  run("aten::relu_", {x});
  expect_close(x, want_relu);
}

TEST(EagerOps, GemmsMatchLibtorch) {
  at::manual_seed(5);
  const at::Tensor a = at::randn({37, 53});
  const at::Tensor b = at::randn({53, 29});
  const at::Tensor bias = at::randn({29});
  expect_close(run("aten::mm", {a, b}), at::mm(a, b), 1e-4, 1e-4);
  expect_close(run("aten::addmm", {bias, a, b, 0.5, 2}), at::addmm(bias, a, b, 0.5, 2), 1e-4, 1e-4);
  const at::Tensor bt = at::randn({29, 53}).t();  // column-major operand
  expect_close(run("aten::mm", {a, bt}), at::mm(a, bt), 1e-4, 1e-4);
  const at::Tensor x3 = at::randn({2, 5, 53});
  const at::Tensor w = at::randn({29, 53});
  expect_close(run("aten::linear", {x3, w, bias}), at::linear(x3, w, bias), 1e-4, 1e-4);
  expect_close(run("aten::linear", {a, w, c10::IValue()}), at::linear(a, w), 1e-4, 1e-4);
  const at::Tensor p = at::randn({3, 11, 13});
  const at::Tensor q = at::randn({3, 13, 7});
  expect_close(run("aten::bmm", {p, q}), at::bmm(p, q), 1e-4, 1e-4);
  const at::Tensor qt = at::randn({3, 7, 13}).transpose(1, 2);
  expect_close(run("aten::bmm", {p, qt}), at::bmm(p, qt), 1e-4, 1e-4);
  expect_close(run("aten::mm", {at::randn({0, 4}), at::randn({4, 3})}), at::zeros({0, 3}));
}

TEST(EagerOps, ReductionsMatchLibtorch) {
  at::manual_seed(9);
  const at::Tensor x = at::randn({4, 6, 35});
  for (int dim = -3; dim < 3; ++dim) {
    SCOPED_TRACE(dim);
    expect_close(run("aten::_softmax", {x, dim, false}), at::_softmax(x, dim, false));
  }
  const at::Tensor xt = x.transpose(0, 2);
  expect_close(run("aten::_softmax", {xt, -1, false}), at::_softmax(xt, -1, false));
  const at::Tensor w = at::randn({35});
  const at::Tensor b = at::randn({35});
  expect_close(run("aten::layer_norm", {x, std::vector<std::int64_t>{35}, w, b, 1e-5, true}),
               at::layer_norm(x, {35}, w, b), 1e-4, 1e-4);
  expect_close(run("aten::layer_norm", {x, std::vector<std::int64_t>{6, 35}, c10::IValue(),
                                        c10::IValue(), 1e-5, true}),
               at::layer_norm(x, {6, 35}), 1e-4, 1e-4);
  for (const std::vector<std::int64_t>& dims :
       std::vector<std::vector<std::int64_t>>{{2}, {0}, {1}, {0, 2}, {-1, 0, 1}, {}}) {
    for (bool keepdim : {false, true}) {
      SCOPED_TRACE(c10::str(c10::IntArrayRef(dims), " keepdim=", keepdim));
      expect_close(run("aten::sum.dim_IntList", {x, c10::IValue(dims), keepdim, c10::IValue()}),
                   at::sum(x, dims, keepdim), 1e-4, 1e-4);
    }
  }
  expect_close(run("aten::sum.dim_IntList", {xt, c10::IValue(std::vector<std::int64_t>{1}), false,
                                             c10::IValue()}),
               at::sum(xt, {1}), 1e-4, 1e-4);
  expect_close(run("aten::sum.dim_IntList", {at::randn({0, 5}), c10::IValue(std::vector<std::int64_t>{0}),
                                             false, c10::IValue()}),
               at::zeros({5}));
}

template <class E>
std::string error_of(const char* signature, std::vector<c10::IValue> args) {
  try {
    run(signature, std::move(args));
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << signature << " did not throw the expected error type";
  return {};
}

TEST(EagerOps, BadInputIsATypedErrorNamingOpAndDevice) {
  const std::string dtype = error_of<NotImplementedError>(
      "aten::add.Tensor", {at::ones({2}, at::kDouble), at::ones({2}, at::kDouble), 1});
  EXPECT_NE(dtype.find("aten::add.Tensor on cpu"), std::string::npos) << dtype;
  EXPECT_NE(dtype.find("Double"), std::string::npos) << dtype;
  const std::string shapes =
      error_of<ValueError>("aten::mul.Tensor", {at::ones({2, 3}), at::ones({4})});
  EXPECT_NE(shapes.find("aten::mul.Tensor on cpu: pack"), std::string::npos) << shapes;
  EXPECT_NE(shapes.find("must match"), std::string::npos) << shapes;
  const std::string mm = error_of<ValueError>("aten::mm", {at::ones({2, 3}), at::ones({4, 5})});
  EXPECT_NE(mm.find("cannot be multiplied (2x3 and 4x5)"), std::string::npos) << mm;
  const std::string dim = error_of<ValueError>("aten::_softmax", {at::ones({2, 3}), 5, false});
  EXPECT_NE(dim.find("dimension out of range"), std::string::npos) << dim;
  const std::string ln = error_of<ValueError>(
      "aten::layer_norm", {at::ones({2, 3}), std::vector<std::int64_t>{4}, c10::IValue(),
                           c10::IValue(), 1e-5, true});
  EXPECT_NE(ln.find("normalized_shape"), std::string::npos) << ln;
  try {
    (void)Extractor::global().resolve("aten::frobnicate");
    ADD_FAILURE();
  } catch (const NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("kernel not found for aten::frobnicate"),
              std::string::npos);
  }
  // An in-place op whose shapes do not broadcast leaves self untouched.
  at::Tensor self = at::ones({3});
  (void)error_of<ValueError>("aten::add_.Tensor", {self, at::ones({2, 3}), 1});
  EXPECT_TRUE(at::equal(self, at::ones({3})));
}

}  // namespace
}  // namespace ka::extractor
