// CuptiProfiler on a real GPU: a kernel, a memset and a copy come back as activities with the
// ka task ids pushed around their launches, on the steady_clock time base of host spans.
// Every test skips, with the reason, where no GPU is visible or CUPTI was not compiled.
#include <ka/profiler/cupti_profiler.hpp>
#include <ka/profiler/span.hpp>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cuda_device.hpp"

namespace ka::profiler {
namespace {

__global__ void ka_profiler_test_kernel(float* data, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = data[i] * 2.0f + 1.0f;
}

std::string no_device_reason() {
  if (!CuptiProfiler::compiled()) return "CUPTI not compiled";
  return test::no_cuda_device_reason();
}

#define KA_REQUIRE_DEVICE() KA_SKIP_UNLESS_EMPTY(no_device_reason(), "no CUDA device or CUPTI")

const GpuActivity* find(const std::vector<GpuActivity>& acts, GpuActivityKind kind) {
  const auto it = std::find_if(acts.begin(), acts.end(),
                               [&](const GpuActivity& a) { return a.kind == kind; });
  return it == acts.end() ? nullptr : &*it;
}

TEST(CuptiProfilerDevice, KernelMemsetAndCopyCarryTaskIds) {
  KA_REQUIRE_DEVICE();
  constexpr int kN = 1 << 20;
  CuptiProfiler profiler;
  const Status started = profiler.start();
  ASSERT_TRUE(started.is_ok()) << started.reason();
  ASSERT_TRUE(profiler.started());

  CuptiProfiler second;
  EXPECT_FALSE(second.start().is_ok()) << "CUPTI's callbacks are process-wide";

  float* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, kN * sizeof(float)), cudaSuccess);
  std::vector<float> host(kN, 1.0f);
  const std::int64_t before_ns = now_ns();
  ASSERT_EQ(cudaMemcpy(device, host.data(), kN * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);  // No task pushed.
  {
    ScopedGpuTask task(43);
    ASSERT_EQ(cudaMemset(device, 0, kN * sizeof(float)), cudaSuccess);
  }
  {
    ScopedGpuTask task(42);
    ka_profiler_test_kernel<<<(kN + 255) / 256, 256>>>(device, kN);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::int64_t after_ns = now_ns();
  profiler.stop();
  EXPECT_FALSE(profiler.started());
  ASSERT_EQ(cudaFree(device), cudaSuccess);

  const std::vector<GpuActivity> acts = profiler.take();
  EXPECT_EQ(profiler.dropped_records(), 0U);
  const GpuActivity* kernel = find(acts, GpuActivityKind::kKernel);
  const GpuActivity* memset = find(acts, GpuActivityKind::kMemset);
  const GpuActivity* copy = find(acts, GpuActivityKind::kMemcpy);
  ASSERT_NE(kernel, nullptr);
  ASSERT_NE(memset, nullptr);
  ASSERT_NE(copy, nullptr);

  EXPECT_NE(kernel->name.find("ka_profiler_test_kernel"), std::string::npos) << kernel->name;
  EXPECT_EQ(kernel->task_id, 42U);
  EXPECT_GT(kernel->end_ns, kernel->start_ns);
  EXPECT_EQ(memset->task_id, 43U);
  EXPECT_EQ(memset->bytes, kN * sizeof(float));
  EXPECT_EQ(copy->name, "memcpy HtoD");
  EXPECT_EQ(copy->task_id, kNoTask);
  EXPECT_EQ(copy->bytes, kN * sizeof(float));

  // GPU times land on the host spans' time base, within the host's view of the work (plus
  // slack for the clock-offset estimate).
  const std::int64_t kernel_start = profiler.to_steady_ns(kernel->start_ns);
  EXPECT_GE(kernel_start, before_ns - 100000);
  EXPECT_LE(profiler.to_steady_ns(kernel->end_ns), after_ns + 100000);
}

TEST(CuptiProfilerDevice, ExportsSpansIntoTheChromeTrace) {
  KA_REQUIRE_DEVICE();
  CuptiProfiler profiler;
  const Status started = profiler.start();
  ASSERT_TRUE(started.is_ok()) << started.reason();
  float* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 1024 * sizeof(float)), cudaSuccess);
  {
    ScopedGpuTask task(7);
    ka_profiler_test_kernel<<<4, 256>>>(device, 1024);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  profiler.stop();
  ASSERT_EQ(cudaFree(device), cudaSuccess);

  SpanRecorder recorder;
  EXPECT_GE(profiler.export_spans(recorder), 1U);
  const std::vector<Span> spans = recorder.collect();
  const auto kernel = std::find_if(spans.begin(), spans.end(),
                                   [](const Span& s) { return s.category == "kernel"; });
  ASSERT_NE(kernel, spans.end());
  EXPECT_EQ(kernel->task_id, 7U);
  EXPECT_GE(kernel->process, 1U);
  EXPECT_NE(recorder.chrome_trace_json().find("\"gpu "), std::string::npos);
}

}  // namespace
}  // namespace ka::profiler
