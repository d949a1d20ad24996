#include <ka/core/device.hpp>
#include <ka/core/dtype.hpp>
#include <ka/core/error.hpp>
#include <ka/core/mem_range.hpp>
#include <ka/core/status.hpp>

#include <gtest/gtest.h>

namespace ka {
namespace {

int g_evaluations = 0;
int count_evaluation() { return ++g_evaluations; }

TEST(Error, CheckThrowsValueErrorWithMessageAndLocation) {
  try {
    KA_CHECK(1 + 1 == 3, "shape ", 4, "x", 5, " is wrong");
    FAIL() << "KA_CHECK did not throw";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "shape 4x5 is wrong");
    EXPECT_NE(e.where().find("error_test.cpp:"), std::string::npos) << e.where();
  }
}

TEST(Error, CheckEvaluatesMessageOnlyOnFailure) {
  g_evaluations = 0;
  KA_CHECK(true, "never ", count_evaluation());
  EXPECT_EQ(g_evaluations, 0);
  EXPECT_THROW(KA_CHECK(false, "now ", count_evaluation()), ValueError);
  EXPECT_EQ(g_evaluations, 1);
}

TEST(Error, CheckTypeAndAssert) {
  EXPECT_THROW(KA_CHECK_TYPE(DbError, false, "x"), DbError);
  try {
    KA_ASSERT(2 < 1, "context");
    FAIL();
  } catch (const InternalError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("internal error, please report"), std::string::npos);
    EXPECT_NE(what.find("'2 < 1'"), std::string::npos);
    EXPECT_NE(what.find("context"), std::string::npos);
  }
  // Every subtype is a ka::Error.
  EXPECT_THROW(KA_THROW(CudaError, "x"), Error);
}

TEST(Status, OkAndUnsupported) {
  EXPECT_TRUE(Status::ok().is_ok());
  const Status bad = Status::unsupported("tile too large");
  EXPECT_FALSE(bad.is_ok());
  EXPECT_FALSE(static_cast<bool>(bad));
  EXPECT_EQ(bad.reason(), "tile too large");
  EXPECT_FALSE(Status::unsupported("").is_ok());
}

TEST(Device, ParseAndPrint) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda:1"), Device::cuda(1));
  EXPECT_EQ(Device::cuda(1).str(), "cuda:1");
  EXPECT_EQ(Device::cpu().str(), "cpu");
  EXPECT_EQ(Device::parse(Device::cuda(0).str()), Device::cuda(0));
  EXPECT_THROW(Device::parse("tpu"), ValueError);
  EXPECT_THROW(Device::parse("cuda:x"), ValueError);
  EXPECT_THROW(Device::parse("cuda:-1"), ValueError);
}

TEST(DType, NamesRoundTrip) {
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                  DType::kInt32, DType::kInt64, DType::kBool}) {
    EXPECT_EQ(parse_dtype(short_name(d)), d);
    EXPECT_EQ(parse_dtype(long_name(d)), d);
  }
  EXPECT_EQ(element_size(DType::kBFloat16), 2U);
  EXPECT_THROW(parse_dtype("float8"), ValueError);
}

TEST(MemRange, OverlapAndConflicts) {
  const MemRange a{Device::cpu(), 1000, 100, Access::kRead};
  const MemRange b{Device::cpu(), 1099, 10, Access::kWrite};
  const MemRange c{Device::cpu(), 1100, 10, Access::kWrite};
  const MemRange d{Device::cuda(0), 1000, 100, Access::kWrite};
  EXPECT_TRUE(a.overlaps(b));
  EXPECT_TRUE(a.conflicts_with(b));          // read-after-write / write-after-read
  EXPECT_FALSE(a.overlaps(c));               // adjacent, no shared byte
  EXPECT_FALSE(a.overlaps(d));               // other device
  const MemRange r2{Device::cpu(), 1050, 10, Access::kRead};
  EXPECT_TRUE(a.overlaps(r2));
  EXPECT_FALSE(a.conflicts_with(r2));        // two reads never conflict
  const MemRange empty{Device::cpu(), 1050, 0, Access::kWrite};
  EXPECT_FALSE(a.overlaps(empty));
}

}  // namespace
}  // namespace ka
