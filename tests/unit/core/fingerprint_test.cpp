#include <ka/core/fingerprint.hpp>

#include <gtest/gtest.h>

#include <sched.h>

namespace ka {
namespace {

TEST(Fingerprint, CpuFieldsAreFilled) {
  const DeviceFingerprint fp = cpu_fingerprint();
  EXPECT_EQ(fp.device, Device::cpu());
  EXPECT_FALSE(fp.name.empty());
  EXPECT_NE(fp.name, "unknown CPU");
  EXPECT_TRUE(fp.isa == "avx512" || fp.isa == "avx2" || fp.isa == "sse4.2" || fp.isa == "generic")
      << fp.isa;
  cpu_set_t mask;  // the cores this process may run on, not the machine's (Note [Usable cores])
  ASSERT_EQ(sched_getaffinity(0, sizeof(mask), &mask), 0);
  EXPECT_EQ(fp.cores, CPU_COUNT(&mask));
  EXPECT_GT(fp.l1d_bytes, 0);
  EXPECT_GT(fp.l2_bytes, fp.l1d_bytes);
  EXPECT_GT(fp.memory_bytes, std::int64_t{1} << 28);
}

TEST(Fingerprint, KeyIsStableAndNamesEveryField) {
  const DeviceFingerprint a = cpu_fingerprint();
  const DeviceFingerprint b = cpu_fingerprint();
  EXPECT_EQ(a.key(), b.key());
  const std::string key = a.key();
  EXPECT_EQ(key.rfind("cpu|", 0), 0U) << key;
  EXPECT_NE(key.find(a.name), std::string::npos);
  EXPECT_NE(key.find("|" + a.isa + "|"), std::string::npos);
  EXPECT_NE(key.find("l2="), std::string::npos);
  DeviceFingerprint other = a;
  other.cores += 1;
  EXPECT_NE(other.key(), key);  // a different machine shape never shares the key
}

TEST(Fingerprint, CudaKeyIncludesDriverAndRuntime) {
  DeviceFingerprint fp;
  fp.device = Device::cuda(0);
  fp.name = "NVIDIA H200";
  fp.isa = "sm_90";
  fp.cores = 132;
  fp.driver_version = "13.0";
  fp.runtime_version = "13.0";
  DeviceFingerprint newer = fp;
  newer.driver_version = "13.1";
  EXPECT_NE(fp.key(), newer.key());
  bool has_driver = false;
  for (const auto& [k, v] : fp.fields()) has_driver |= (k == "driver_version" && v == "13.0");
  EXPECT_TRUE(has_driver);
}

}  // namespace
}  // namespace ka
