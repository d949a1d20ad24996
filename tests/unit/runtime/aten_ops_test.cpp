// aten::mm / aten::addmm served by ka's CPU GEMM through ka's dispatcher, against libtorch.
#include <ka/core/error.hpp>
#include <ka/dispatch/dispatcher.hpp>
#include <ka/runtime/aten_ops.hpp>
#include <ka/extractor/tensor_interop.hpp>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace ka::runtime {
namespace {

using dispatch::Dispatcher;

class AtenOpsTest : public ::testing::Test {
 protected:
  void SetUp() override { register_aten_ops(); }
};

TEST_F(AtenOpsTest, RegistrationIsIdempotent) {
  const auto& ops = register_aten_ops();
  EXPECT_EQ(&ops, &register_aten_ops());
  for (const auto& name : ops) EXPECT_TRUE(Dispatcher::singleton().find_op(name).has_value()) << name;
}

TEST_F(AtenOpsTest, TypedAddmmMatchesLibtorch) {
  at::manual_seed(7);
  const at::Tensor bias = at::rand({33});
  const at::Tensor a = at::rand({17, 29});
  const at::Tensor b = at::rand({29, 33});
  const auto op = Dispatcher::singleton().find_op_or_throw("aten::addmm");
  const auto addmm = op.typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                         const at::Scalar&, const at::Scalar&)>();
  const at::Tensor got = addmm.call(bias, a, b, 0.5, 2.0);
  EXPECT_TRUE(at::allclose(got, at::addmm(bias, a, b, 0.5, 2.0), 1e-4, 1e-5));
}

// The out= overloads write the caller's tensor (resized as PyTorch resizes it) and return it;
// an out that is not contiguous, or that overlaps an input, is declined with a clear error.
TEST_F(AtenOpsTest, OutOverloadsWriteTheCallersTensor) {
  using T = const at::Tensor&;
  using S = const at::Scalar&;
  at::manual_seed(11);
  const at::Tensor bias = at::rand({33});
  const at::Tensor a = at::rand({17, 29});
  const at::Tensor b = at::rand({29, 33});
  auto& d = Dispatcher::singleton();
  const auto addmm_out = d.find_op_or_throw("aten::addmm.out").typed<at::Tensor(T, T, T, S, S, T)>();
  const auto mm_out = d.find_op_or_throw("aten::mm.out").typed<at::Tensor(T, T, T)>();
  const at::Tensor out = at::empty({17, 33});
  const void* storage = out.data_ptr();
  const at::Tensor got = addmm_out.call(bias, a, b, 0.5, 2.0, out);
  EXPECT_TRUE(got.is_same(out));
  EXPECT_EQ(out.data_ptr(), storage);
  EXPECT_TRUE(at::allclose(out, at::addmm(bias, a, b, 0.5, 2.0), 1e-4, 1e-5));
  const at::Tensor empty = at::empty({0});
  mm_out.call(a, b, empty);
  EXPECT_EQ(empty.sizes(), at::IntArrayRef({17, 33}));
  EXPECT_TRUE(at::allclose(empty, at::mm(a, b), 1e-4, 1e-5));

  const at::Tensor strided = at::empty({33, 17}).t();
  EXPECT_THROW(mm_out.call(a, b, strided), NotImplementedError);
  const at::Tensor square = at::rand({29, 29});
  try {
    mm_out.call(square, square, square);
    FAIL() << "an out that aliases its input was accepted";
  } catch (const NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("'out' overlaps an input"), std::string::npos) << e.what();
  }
}

TEST_F(AtenOpsTest, BoxedMmMatchesLibtorch) {
  const at::Tensor a = at::rand({8, 300});
  const at::Tensor b = at::rand({300, 5}).t().contiguous().t();  // column-major view
  dispatch::Stack stack{a, b};
  Dispatcher::singleton().find_op_or_throw("aten::mm").call_boxed(&stack);
  ASSERT_EQ(stack.size(), 1U);
  EXPECT_TRUE(at::allclose(stack[0].toTensor(), at::mm(a, b), 1e-4, 1e-4));
}

TEST_F(AtenOpsTest, UnsupportedDtypeIsAClearError) {
  const at::Tensor a = at::rand({2, 2}, at::kDouble);
  dispatch::Stack stack{a, a};
  try {
    Dispatcher::singleton().find_op_or_throw("aten::mm").call_boxed(&stack);
    FAIL();
  } catch (const NotImplementedError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("aten::mm"), std::string::npos) << what;
    EXPECT_NE(what.find("float32"), std::string::npos) << what;
  }
}

TEST_F(AtenOpsTest, ComputedTableNamesKasKernelForCpu) {
  const std::string table =
      Dispatcher::singleton().find_op_or_throw("aten::addmm").dump_computed_table();
  EXPECT_NE(table.find("CPU: ka extract+execute (aten::addmm) [kernel]"), std::string::npos) << table;
  Dispatcher::singleton().find_op_or_throw("aten::addmm").check_invariants();
}

TEST(TensorInterop, ViewsMatchTheTensor) {
  const at::Tensor t = at::rand({3, 4, 5}).transpose(0, 2);
  const kernels::TensorView v = extractor::to_view(t);
  EXPECT_EQ(v.ndim, 3);
  EXPECT_EQ(v.data, t.data_ptr());
  EXPECT_EQ(v.dtype, DType::kFloat32);
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(v.size(d), t.size(d));
    EXPECT_EQ(v.stride(d), t.stride(d));
  }
  EXPECT_FALSE(v.is_contiguous());
  EXPECT_TRUE(extractor::to_view(at::rand({2, 3})).is_contiguous());
  EXPECT_EQ(extractor::to_dtype(at::kBFloat16), DType::kBFloat16);
  EXPECT_THROW(extractor::to_dtype(at::kComplexFloat), ValueError);
  EXPECT_THROW(extractor::to_view(at::Tensor()), ValueError);
}

}  // namespace
}  // namespace ka::runtime
