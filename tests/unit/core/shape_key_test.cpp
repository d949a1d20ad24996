#include <ka/core/error.hpp>
#include <ka/core/shape_key.hpp>
#include <ka/core/text.hpp>

#include <gtest/gtest.h>

namespace ka {
namespace {

ShapeKey addmm_key() {
  return ShapeKey("aten::addmm", {{DType::kFloat32, {3072}, true},
                                  {DType::kFloat32, {512, 768}, true},
                                  {DType::kFloat32, {768, 3072}, false}});
}

TEST(ShapeKey, CanonicalForm) {
  EXPECT_EQ(addmm_key().str(), "aten::addmm(f32[3072]c,f32[512,768]c,f32[768,3072]s)");
  const ShapeKey scalar("aten::add.Tensor", {{DType::kBFloat16, {}, true}});
  EXPECT_EQ(scalar.str(), "aten::add.Tensor(bf16[]c)");
  const ShapeKey none("aten::zeros", {});
  EXPECT_EQ(none.str(), "aten::zeros()");
}

TEST(ShapeKey, RoundTrips) {
  for (const ShapeKey& k :
       {addmm_key(), ShapeKey("aten::add.Tensor", {{DType::kBFloat16, {}, true}}),
        ShapeKey("aten::zeros", {}),
        ShapeKey("aten::mm", {{DType::kFloat32, {0, 5}, true}, {DType::kFloat32, {5, 0}, true}}),
        ShapeKey("aten::mm", {{DType::kFloat32, {1, 64}, true},
                              {DType::kFloat32, {64, 32}, false, true}})}) {
    const ShapeKey back = ShapeKey::parse(k.str());
    EXPECT_EQ(back, k);
    EXPECT_EQ(back.args(), k.args());
    EXPECT_EQ(back.op(), k.op());
    EXPECT_EQ(back.hash(), k.hash());
  }
}

TEST(ShapeKey, HashIsFnv1aOfTheCanonicalText) {
  // Published FNV-1a 64 test vectors: the hash is the same on every machine and build, so
  // stored keys stay valid.
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ULL);
  EXPECT_EQ(addmm_key().hash(), fnv1a64(addmm_key().str()));
  EXPECT_NE(addmm_key().hash(),
            ShapeKey::parse("aten::addmm(f32[3072]c,f32[512,768]c,f32[768,3072]c)").hash());
}

// nn.Linear's weight reaches the GEMM as the transpose of a contiguous matrix: its own layout
// letter, so tables keep it apart from row-major and from other strided mat2s.
TEST(ShapeKey, TransposedMatricesHaveTheirOwnLayout) {
  const ShapeKey t("aten::mm", {{DType::kFloat32, {1, 64}, true},
                                {DType::kFloat32, {64, 32}, false, true}});
  EXPECT_EQ(t.str(), "aten::mm(f32[1,64]c,f32[64,32]t)");
  EXPECT_NE(t, ShapeKey::parse("aten::mm(f32[1,64]c,f32[64,32]s)"));
  EXPECT_NE(t, ShapeKey::parse("aten::mm(f32[1,64]c,f32[64,32]c)"));
  EXPECT_THROW(ShapeKey::parse("aten::sum(f32[2,3,4]t)"), ValueError);  // only a matrix
  EXPECT_THROW(ShapeKey("aten::mm", {{DType::kFloat32, {2, 2}, true, true}}), ValueError);
}

TEST(ShapeKey, OverloadNamesAreDistinct) {
  const ShapeKey t("aten::add.Tensor", {{DType::kFloat32, {4}, true}});
  const ShapeKey s("aten::add.Scalar", {{DType::kFloat32, {4}, true}});
  EXPECT_NE(t, s);
  EXPECT_NE(t.hash(), s.hash());
}

TEST(ShapeKey, RejectsBadInput) {
  EXPECT_THROW(ShapeKey("addmm", {}), ValueError);
  EXPECT_THROW(ShapeKey("aten::", {}), ValueError);
  EXPECT_THROW(ShapeKey("aten::add..Tensor", {}), ValueError);
  EXPECT_THROW(ShapeKey("aten::mm", {{DType::kFloat32, {-1}, true}}), ValueError);
  for (const char* bad : {"aten::mm", "aten::mm(f32[2,2]x)", "aten::mm(f32[2,a]c)",
                          "aten::mm(q32[2]c)", "aten::mm(f32[2]c;f32[2]c)", "aten::mm(f32[2]c,)"}) {
    EXPECT_THROW(ShapeKey::parse(bad), ValueError) << bad;
  }
}

}  // namespace
}  // namespace ka
