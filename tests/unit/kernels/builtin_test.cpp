// The list of built-in kernels: one per op family and device type, each name once.
#include <ka/core/error.hpp>
#include <ka/kernels/builtin.hpp>
#include <ka/kernels/gemm.hpp>

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace ka::kernels {
namespace {

TEST(BuiltinKernels, EachFamilyHasACpuKernelAndCudaOnesWhenCompiled) {
  const std::size_t families = std::size(kOpFamilies);
  const auto all = builtin_kernels();
  EXPECT_EQ(all.size(), cuda_compiled() ? 2 * families : families);
  std::set<std::string> names;
  for (const KernelDescriptor* k : all) {
    EXPECT_TRUE(names.insert(k->name).second) << k->name << " is listed twice";
    EXPECT_GE(k->version, 1) << k->name;
  }
  for (const OpFamily f : kOpFamilies) {
    EXPECT_EQ(builtin_kernel(f, DeviceType::kCPU).device, DeviceType::kCPU);
    EXPECT_EQ(builtin_kernel(f, DeviceType::kCUDA).device, DeviceType::kCUDA);
  }
  EXPECT_EQ(builtin_kernel(OpFamily::kGemm, DeviceType::kCPU).name, gemm_f32_cpu_descriptor().name);
}

TEST(BuiltinKernels, OtherDeviceTypesHaveNone) {
  EXPECT_THROW(builtin_kernel(OpFamily::kGemm, DeviceType::kPrivateUse1), ValueError);
}

}  // namespace
}  // namespace ka::kernels
