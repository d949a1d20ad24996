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
