// The extractor registers exactly the built-in kernels that tools without libtorch (ka-db)
// list through ka::kernels::builtin_kernels().
#include <ka/extractor/extractor.hpp>
#include <ka/kernels/builtin.hpp>

#include <gtest/gtest.h>

namespace ka::extractor {
namespace {

TEST(KernelVersions, AreTheBuiltinKernels) {
  db::KernelVersions builtin;
  for (const kernels::KernelDescriptor* k : kernels::builtin_kernels()) {
    builtin[k->name] = k->version;
  }
  const Extractor extractor;
  EXPECT_EQ(extractor.kernel_versions(), builtin);
}

}  // namespace
}  // namespace ka::extractor
