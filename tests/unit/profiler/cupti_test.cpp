// CUPTI record parsing and task correlation with synthetic records (no GPU needed), and the
// profiler's behaviour where CUPTI is not compiled or no GPU is present.
#include <ka/core/error.hpp>
#include <ka/profiler/cupti_profiler.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#if KA_HAVE_CUPTI
#include <ka/profiler/detail/cupti_check.hpp>
#include <ka/profiler/detail/cupti_records.hpp>
#endif

namespace ka::profiler {
namespace {

#if KA_HAVE_CUPTI

using detail::ActivityParser;

// Records as CUPTI lays them out, zeroed first like a fresh buffer.
template <typename Record>
Record zeroed() {
  Record r;
  std::memset(&r, 0, sizeof r);
  return r;
}

const CUpti_Activity& as_activity(const void* record) {
  return *static_cast<const CUpti_Activity*>(record);
}

detail::KernelRecord kernel(const char* name, std::uint32_t correlation, std::uint64_t start,
                            std::uint64_t end, std::uint32_t stream = 7) {
  auto k = zeroed<detail::KernelRecord>();
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.name = name;
  k.correlationId = correlation;
  k.start = start;
  k.end = end;
  k.streamId = stream;
  k.deviceId = 0;
  return k;
}

detail::ExternalCorrelationRecord task_link(
    std::uint32_t correlation, std::uint64_t task,
    CUpti_ExternalCorrelationKind kind = detail::kTaskCorrelationKind) {
  auto e = zeroed<detail::ExternalCorrelationRecord>();
  e.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
  e.externalKind = kind;
  e.externalId = task;
  e.correlationId = correlation;
  return e;
}

TEST(CuptiRecords, KernelMemcpyMemsetAndCorrelation) {
  ActivityParser parser;
  const auto link = task_link(11, 42);
  const auto k = kernel("_Z4gemmPKfS0_Pfi", 11, 1000, 5000);
  auto copy = zeroed<detail::MemcpyRecord>();
  copy.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  copy.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  copy.bytes = 4096;
  copy.start = 100;
  copy.end = 900;
  copy.correlationId = 10;  // No task pushed for this one.
  copy.streamId = 3;
  copy.deviceId = 1;
  auto set = zeroed<detail::MemsetRecord>();
  set.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  set.bytes = 256;
  set.start = 6000;
  set.end = 6100;
  set.correlationId = 12;
  auto runtime = zeroed<CUpti_ActivityAPI>();
  runtime.kind = CUPTI_ACTIVITY_KIND_RUNTIME;

  // CUPTI emits the correlation record when the API call is made, before the kernel's.
  parser.consume(as_activity(&link));
  parser.consume(as_activity(&copy));
  parser.consume(as_activity(&k));
  parser.consume(as_activity(&set));
  parser.consume(as_activity(&runtime));
  EXPECT_EQ(parser.pending(), 3U);
  EXPECT_EQ(parser.correlations(), 1U);
  EXPECT_EQ(parser.ignored(), 1U);

  const std::vector<GpuActivity> acts = parser.take();
  ASSERT_EQ(acts.size(), 3U);
  EXPECT_EQ(parser.pending(), 0U);

  EXPECT_EQ(acts[0].kind, GpuActivityKind::kMemcpy);
  EXPECT_EQ(acts[0].name, "memcpy HtoD");
  EXPECT_EQ(acts[0].bytes, 4096U);
  EXPECT_EQ(acts[0].stream, 3U);
  EXPECT_EQ(acts[0].device, 1U);
  EXPECT_EQ(acts[0].task_id, kNoTask);

  EXPECT_EQ(acts[1].kind, GpuActivityKind::kKernel);
  EXPECT_EQ(acts[1].name, "gemm(float const*, float const*, float*, int)");
  EXPECT_EQ(acts[1].start_ns, 1000U);
  EXPECT_EQ(acts[1].end_ns, 5000U);
  EXPECT_EQ(acts[1].duration_ns(), 4000U);
  EXPECT_EQ(acts[1].correlation_id, 11U);
  EXPECT_EQ(acts[1].stream, 7U);
  EXPECT_EQ(acts[1].task_id, 42U);

  EXPECT_EQ(acts[2].kind, GpuActivityKind::kMemset);
  EXPECT_EQ(acts[2].name, "memset");
  EXPECT_EQ(acts[2].bytes, 256U);
}

TEST(CuptiRecords, CorrelationArrivingInALaterBufferStillJoins) {
  ActivityParser parser;
  const auto k = kernel("plain_c_name", 5, 10, 20);
  const auto link = task_link(5, 9);
  // The kernel's buffer completed first; take() is only called once both have arrived.
  parser.consume(as_activity(&k));
  parser.consume(as_activity(&link));
  std::vector<GpuActivity> acts = parser.take();
  ASSERT_EQ(acts.size(), 1U);
  EXPECT_EQ(acts[0].name, "plain_c_name") << "names that are not mangled stay as they are";
  EXPECT_EQ(acts[0].task_id, 9U);

  // Correlations outlive take(): a later kernel of the same launch still finds its task.
  const auto again = kernel("k2", 5, 30, 40);
  parser.consume(as_activity(&again));
  acts = parser.take();
  ASSERT_EQ(acts.size(), 1U);
  EXPECT_EQ(acts[0].task_id, 9U);

  parser.clear();
  EXPECT_EQ(parser.correlations(), 0U);
}

TEST(CuptiRecords, ForeignCorrelationKindsAreIgnored) {
  ActivityParser parser;
  const auto foreign = task_link(3, 77, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1);
  const auto k = kernel("k", 3, 1, 2);
  parser.consume(as_activity(&foreign));
  parser.consume(as_activity(&k));
  const std::vector<GpuActivity> acts = parser.take();
  ASSERT_EQ(acts.size(), 1U);
  EXPECT_EQ(acts[0].task_id, kNoTask);
  EXPECT_EQ(parser.ignored(), 1U);
}

TEST(CuptiRecords, JoinTaskIds) {
  std::vector<GpuActivity> acts(3);
  acts[0].correlation_id = 1;
  acts[1].correlation_id = 2;
  acts[2].correlation_id = 3;
  detail::join_task_ids(acts, {{1, 100}, {3, 300}});
  EXPECT_EQ(acts[0].task_id, 100U);
  EXPECT_EQ(acts[1].task_id, kNoTask);
  EXPECT_EQ(acts[2].task_id, 300U);
}

TEST(CuptiRecords, MemcpyKindNamesAndDemangle) {
  EXPECT_STREQ(detail::memcpy_kind_name(CUPTI_ACTIVITY_MEMCPY_KIND_DTOH), "DtoH");
  EXPECT_STREQ(detail::memcpy_kind_name(CUPTI_ACTIVITY_MEMCPY_KIND_DTOD), "DtoD");
  EXPECT_STREQ(detail::memcpy_kind_name(12345), "unknown");
  EXPECT_EQ(detail::demangle(nullptr), "<unnamed>");
  EXPECT_EQ(detail::demangle("_ZN2ka6kernel4stepEv"), "ka::kernel::step()");
}

TEST(CuptiCheck, MessageNamesTheCallAndTheError) {
  try {
    KA_CUPTI_CHECK(CUPTI_ERROR_INVALID_PARAMETER);
    FAIL() << "KA_CUPTI_CHECK did not throw";
  } catch (const CuptiError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cupti_test.cpp:"), std::string::npos) << what;
    EXPECT_NE(what.find(": CUPTI call failed: CUPTI_ERROR_INVALID_PARAMETER"), std::string::npos)
        << what;
    EXPECT_NE(what.find(" / call: 'CUPTI_ERROR_INVALID_PARAMETER'"), std::string::npos) << what;
  }
  EXPECT_NO_THROW(KA_CUPTI_CHECK(CUPTI_SUCCESS));
}

#else

TEST(CuptiRecords, SkippedWithoutCupti) {
  GTEST_SKIP() << "CUPTI not compiled (no cupti.h/libcupti at configure time): record parsing "
                  "is not built";
}

#endif  // KA_HAVE_CUPTI

TEST(CuptiProfiler, UnstartedProfilerIsEmpty) {
  CuptiProfiler profiler;
  EXPECT_FALSE(profiler.started());
  EXPECT_TRUE(profiler.take().empty());
  EXPECT_EQ(profiler.dropped_records(), 0U);
  SpanRecorder rec;
  EXPECT_EQ(profiler.export_spans(rec), 0U);
  EXPECT_NO_THROW(profiler.stop());
  // Pushing a task with no profiler started is a no-op, and pops balance.
  { ScopedGpuTask task(5); }
  CuptiProfiler::pop_task();  // Unbalanced pop: ignored.
}

TEST(CuptiProfiler, StartEitherWorksOrSaysWhy) {
  // Without a GPU (as on CI), CUPTI refuses to enable activity; that must be a reason, not an
  // exception, and must leave the process free to start a profiler later.
  for (int attempt = 0; attempt < 2; ++attempt) {
    CuptiProfiler profiler;
    const Status s = profiler.start();
    if (s.is_ok()) {
      EXPECT_TRUE(profiler.started());
      profiler.stop();
      EXPECT_FALSE(profiler.started());
    } else {
      EXPECT_FALSE(profiler.started());
      const bool explained = s.reason().find("CUPTI call failed: ") != std::string::npos ||
                             s.reason().find("CUPTI not compiled") != std::string::npos;
      EXPECT_TRUE(explained) << s.reason();
      EXPECT_EQ(s.reason().find("another CuptiProfiler"), std::string::npos)
          << "a failed start must not leave the profiler registered";
    }
  }
}

TEST(CuptiProfiler, StubSaysCuptiIsNotCompiled) {
  if (CuptiProfiler::compiled()) GTEST_SKIP() << "CUPTI is compiled; the stub is not built";
  CuptiProfiler profiler;
  const Status s = profiler.start();
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.reason().find("CUPTI not compiled"), std::string::npos) << s.reason();
}

}  // namespace
}  // namespace ka::profiler
