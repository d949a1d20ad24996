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
  std::size_t on_cuda = 0;
  for (const OpFamily f : kOpFamilies) on_cuda += has_builtin_kernel(f, DeviceType::kCUDA) ? 1 : 0;
  EXPECT_EQ(on_cuda, families - 1) << "every family but attention has a CUDA kernel";
  const auto all = builtin_kernels();
  EXPECT_EQ(all.size(), cuda_compiled() ? families + on_cuda : families);
  std::set<std::string> names;
  for (const KernelDescriptor* k : all) {
    EXPECT_TRUE(names.insert(k->name).second) << k->name << " is listed twice";
    EXPECT_GE(k->version, 1) << k->name;
  }
  for (const OpFamily f : kOpFamilies) {
    EXPECT_EQ(builtin_kernel(f, DeviceType::kCPU).device, DeviceType::kCPU);
    if (has_builtin_kernel(f, DeviceType::kCUDA)) {
      EXPECT_EQ(builtin_kernel(f, DeviceType::kCUDA).device, DeviceType::kCUDA);
    } else {
      EXPECT_THROW(builtin_kernel(f, DeviceType::kCUDA), NotImplementedError);
    }
  }
  EXPECT_EQ(builtin_kernel(OpFamily::kGemm, DeviceType::kCPU).name, gemm_f32_cpu_descriptor().name);
}

TEST(BuiltinKernels, OtherDeviceTypesHaveNone) {
  EXPECT_THROW(builtin_kernel(OpFamily::kGemm, DeviceType::kPrivateUse1), ValueError);
}

}  // namespace
}  // namespace ka::kernels
