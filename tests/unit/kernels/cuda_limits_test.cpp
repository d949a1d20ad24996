// Launch-configuration validity against recorded device limits of the GPUs ka is tuned on
// (H100, H200, A100): every point of every CUDA descriptor's space must launch there, and
// configurations past a limit are refused with the limit, the device and both numbers.
#include <ka/kernels/cuda_limits.hpp>
#include <ka/kernels/elementwise.hpp>
#include <ka/kernels/gemm.hpp>
#include <ka/kernels/reduction.hpp>

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace ka::kernels {
namespace {

std::vector<CudaDeviceLimits> recorded() {
  return {CudaDeviceLimits::h100_sxm(), CudaDeviceLimits::h200(), CudaDeviceLimits::a100_sxm()};
}

TEST(CudaLimits, RecordedDevicesAreTheRealParts) {
  const auto h100 = CudaDeviceLimits::h100_sxm();
  EXPECT_EQ(h100.cc_major, 9);
  EXPECT_EQ(h100.sm_count, 132);
  EXPECT_EQ(h100.shared_per_block_optin, 227 * 1024);
  const auto a100 = CudaDeviceLimits::a100_sxm();
  EXPECT_EQ(a100.cc_major, 8);
  EXPECT_EQ(a100.sm_count, 108);
  EXPECT_EQ(a100.shared_per_block_optin, 163 * 1024);
  EXPECT_EQ(CudaDeviceLimits::h200().sm_count, 132);
  for (const auto& l : recorded()) {
    EXPECT_EQ(l.max_threads_per_block, 1024) << l.name;
    EXPECT_EQ(l.shared_per_block, 48 * 1024) << l.name;
    EXPECT_EQ(l.regs_per_block, 65536) << l.name;
  }
}

TEST(CudaLimits, EveryPointOfEveryCudaSpaceLaunchesOnTheRecordedGpus) {
  const ShapeKey gemm = addmm_shape_key(1000, 700, 900, true);
  const ShapeKey bmm("aten::bmm", {{DType::kFloat32, {12, 512, 64}, true},
                                   {DType::kFloat32, {12, 64, 512}, true}});
  const ShapeKey ew("aten::add.Tensor", {{DType::kFloat32, {4096, 4096}, true},
                                         {DType::kFloat32, {4096}, true}});
  const ShapeKey rows("aten::_softmax", {{DType::kFloat32, {512, 4096}, true}});
  const ShapeKey ln("aten::layer_norm", {{DType::kFloat32, {512, 768}, true},
                                         {DType::kFloat32, {768}, true},
                                         {DType::kFloat32, {768}, true}});
  const ShapeKey sum("aten::sum.dim_IntList", {{DType::kFloat32, {512, 4096}, true}});
  const std::vector<std::pair<const KernelDescriptor*, ShapeKey>> cases = {
      {&gemm_f32_cuda_descriptor(), gemm},     {&bmm_f32_cuda_descriptor(), bmm},
      {&elementwise_f32_cuda_descriptor(), ew}, {&softmax_f32_cuda_descriptor(), rows},
      {&layer_norm_f32_cuda_descriptor(), ln}, {&sum_f32_cuda_descriptor(), sum},
      {&gemm_bf16_cuda_descriptor(), mm_bf16_shape_key(1000, 700, 900)},
  };
  for (const auto& [d, key] : cases) {
    const auto points = d->space.enumerate();
    ASSERT_FALSE(points.empty()) << d->name;
    for (const auto& limits : recorded()) {
      for (const LaunchConfig& point : points) {
        const LaunchConfig full = d->complete(key, point);
        const CudaLaunchNeeds needs = launch_needs(full);
        EXPECT_GT(needs.threads_per_block, 0) << d->name << " " << full.str();
        const Status st = check_cuda_launch(limits, needs, d->name);
        EXPECT_TRUE(st.is_ok()) << d->name << " on " << limits.name << ": " << st.reason();
      }
      const LaunchConfig def = d->default_config(key);
      EXPECT_TRUE(check_cuda_launch(limits, launch_needs(def), d->name).is_ok()) << d->name;
    }
  }
}

TEST(CudaLimits, TheFp32PeakIsTheDatasheets) {
  // NVIDIA's datasheets: H100 SXM 67 TFLOP/s fp32, A100 19.5 TFLOP/s.
  EXPECT_NEAR(cuda_fp32_peak_gflops(CudaDeviceLimits::h100_sxm()), 66908.0, 1.0);
  EXPECT_NEAR(cuda_fp32_peak_gflops(CudaDeviceLimits::h200()), 66908.0, 1.0);
  EXPECT_NEAR(cuda_fp32_peak_gflops(CudaDeviceLimits::a100_sxm()), 19492.0, 1.0);
  EXPECT_EQ(fp32_lanes_per_sm(7, 0), 64);
  EXPECT_EQ(fp32_lanes_per_sm(8, 6), 128);  // RTX 30x0: 128 per SM, where A100 has 64
  EXPECT_EQ(fp32_lanes_per_sm(8, 9), 128);
  CudaDeviceLimits unknown_clock = CudaDeviceLimits::h100_sxm();
  unknown_clock.clock_mhz = 0;
  EXPECT_EQ(cuda_fp32_peak_gflops(unknown_clock), 0.0);
}

TEST(CudaLimits, TheFingerprintOfADeviceNamesWhatTunedEntriesDependOn) {
  CudaDeviceLimits h200 = CudaDeviceLimits::h200();
  h200.memory_bytes = std::int64_t{143771} << 20;
  h200.clock_mhz = 1980;
  h200.memory_clock_mhz = 3201;
  const DeviceFingerprint fp = cuda_fingerprint(h200, 13000, 12080);
  EXPECT_EQ(fp.device.type, DeviceType::kCUDA);
  EXPECT_EQ(fp.isa, "sm_90");
  EXPECT_EQ(fp.cores, 132);
  EXPECT_EQ(fp.driver_version, "13.0");
  EXPECT_EQ(fp.runtime_version, "12.8");
  EXPECT_EQ(fp.key(),
            "cuda|NVIDIA H200|sm_90|cores=132|l2=61440K|memory=143771M|clock=1980MHz|"
            "memory_clock=3201MHz|driver=13.0|runtime=12.8");
  // Another runtime, clock or part is another key: its tuned entries are not reused.
  EXPECT_NE(cuda_fingerprint(h200, 13000, 13000).key(), fp.key());
  CudaDeviceLimits slower = h200;
  slower.clock_mhz = 1755;
  EXPECT_NE(cuda_fingerprint(slower, 13000, 12080).key(), fp.key());
  EXPECT_NE(cuda_fingerprint(CudaDeviceLimits::h100_sxm(), 13000, 12080).key(), fp.key());
  bool has_clock = false;
  for (const auto& [field, value] : fp.fields()) has_clock = has_clock || field == "clock_mhz";
  EXPECT_TRUE(has_clock);
  // Here: a fingerprint exactly when there is a device, and then it agrees with the limits.
  const auto here = current_cuda_fingerprint();
  const auto limits = current_cuda_limits();
  ASSERT_EQ(here.has_value(), limits.has_value());
  if (here) {
    EXPECT_EQ(here->name, limits->name);
    EXPECT_EQ(here->cores, limits->sm_count);
    EXPECT_FALSE(here->runtime_version.empty());
  }
}

TEST(CudaLimits, ConfigsPastALimitAreRefusedWithTheLimitAndTheDevice) {
  const auto h100 = CudaDeviceLimits::h100_sxm();
  const auto a100 = CudaDeviceLimits::a100_sxm();
  LaunchConfig big;
  big.block = {2048, 1, 1};
  Status st = check_cuda_launch(h100, launch_needs(big), "k");
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.reason(), "k: 2048 threads per block, NVIDIA H100 SXM allows 1024");
  big.block = {32, 32, 1};  // 1024 in two dimensions: the product counts
  EXPECT_TRUE(check_cuda_launch(h100, launch_needs(big), "k").is_ok());
  big.block = {32, 32, 2};
  EXPECT_FALSE(check_cuda_launch(h100, launch_needs(big), "k").is_ok());

  // Static shared memory stops at 48 KiB; dynamic goes to the opt-in limit, which differs.
  CudaLaunchNeeds smem;
  smem.threads_per_block = 256;
  smem.static_shared_bytes = 64 * 1024;
  st = check_cuda_launch(a100, smem, "k");
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.reason().find("65536 bytes of static shared memory per block"), std::string::npos)
      << st.reason();
  smem.static_shared_bytes = 0;
  smem.dynamic_shared_bytes = 200 * 1024;
  EXPECT_TRUE(check_cuda_launch(h100, smem, "k").is_ok());
  st = check_cuda_launch(a100, smem, "k");
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.reason().find("NVIDIA A100-SXM4 allows 166912"), std::string::npos) << st.reason();

  // Registers: per thread and per block.
  CudaLaunchNeeds regs;
  regs.threads_per_block = 1024;
  regs.regs_per_thread = 64;  // exactly the register file
  EXPECT_TRUE(check_cuda_launch(h100, regs, "k").is_ok());
  regs.regs_per_thread = 72;
  st = check_cuda_launch(h100, regs, "k");
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.reason().find("73728 registers per block"), std::string::npos) << st.reason();
  regs.regs_per_thread = 256;
  regs.threads_per_block = 32;
  EXPECT_NE(check_cuda_launch(h100, regs, "k").reason().find("registers per thread"),
            std::string::npos);
  regs.regs_per_thread = 64;
  regs.threads_per_block = 1024 / 2;
  EXPECT_TRUE(check_cuda_launch(h100, regs, "k").is_ok());
}

TEST(CudaLimits, TheDescriptorsCheckAgainstTheDeviceHereWhenThereIsOne) {
  // Without a visible device there is nothing to check against: can_run decides from the space.
  // With one, a config of the space still passes (the test above shows it fits every GPU).
  const ShapeKey key = addmm_shape_key(64, 64, 64, false);
  const KernelDescriptor& d = gemm_f32_cuda_descriptor();
  const LaunchConfig def = d.default_config(key);
  EXPECT_TRUE(d.can_run(key, def).is_ok()) << d.can_run(key, def).reason();
  if (const auto here = current_cuda_limits()) {
    EXPECT_GT(here->max_threads_per_block, 0);
    EXPECT_FALSE(here->name.empty());
  }
}

}  // namespace
}  // namespace ka::kernels
