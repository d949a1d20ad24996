// Isolated trials (Note [Isolated trials]): a test-only kernel for aten::relu whose tunable
// `fault` picks a fault, swept by tune() in worker processes. This executable has its own
// main(): it registers the kernel, then serves trial workers, so a worker (this program
// again) has the kernel too.
#include <ka/core/error.hpp>
#include <ka/core/interrupt.hpp>
#include <ka/db/sqlite.hpp>
#include <ka/extractor/extractor.hpp>
#include <ka/kernels/elementwise.hpp>
#include <ka/tuner/trial_worker.hpp>
#include <ka/tuner/tune.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <thread>

namespace {

namespace fs = std::filesystem;
using ka::LaunchConfig;

// The faults, by the value of the kernel's `fault` tunable. kUnusable computes the right result
// but leaves its process unfit for more trials, as a lost CUDA context would.
enum Fault : std::int64_t { kNone, kSegfault, kSpin, kWrongElement, kAbort, kUnusable };

struct FaultJob {
  const float* in;
  float* out;
  std::int64_t n;
  std::int64_t fault;
};

void run_fault_job(const FaultJob& j, std::int64_t /*block*/) {
  if (j.fault == kSegfault) std::raise(SIGSEGV);
  if (j.fault == kAbort) std::abort();
  if (j.fault == kSpin) {
    volatile std::int64_t spins = 0;
    for (;;) spins = spins + 1;
  }
  for (std::int64_t i = 0; i < j.n; ++i) j.out[i] = j.in[i] > 0.0f ? j.in[i] : 0.0f;
  if (j.fault == kWrongElement) j.out[j.n / 2] += 1.0f;
  if (j.fault == kUnusable) ka::tuner::mark_trial_worker_unusable("test: the device is gone");
}

ka::Status prepare_fault_relu(const void* args, const LaunchConfig& config,
                              ka::kernels::CpuLaunch& launch) {
  const auto& a = *static_cast<const ka::kernels::ElementwiseArgs*>(args);
  const FaultJob job{static_cast<const float*>(a.inputs[0].data), static_cast<float*>(a.out.data),
                     a.out.numel(), config.get("fault").value_or(kNone)};
  launch.bind<FaultJob, &run_fault_job>(job, 1, 1);
  return ka::Status::ok();
}

const ka::kernels::KernelDescriptor& fault_descriptor() {
  static const ka::kernels::KernelDescriptor d = [] {
    ka::kernels::KernelDescriptor k;
    k.name = "fault_injection_relu";
    k.ops = {"aten::relu"};
    k.dtypes = {ka::DType::kFloat32};
    k.space = ka::kernels::TunableSpace(
        {{"fault", {kNone, kSegfault, kSpin, kWrongElement, kAbort, kUnusable},
          "the fault to inject"}},
        {});
    k.default_config = [](const ka::ShapeKey&) {
      LaunchConfig c;
      c.set("fault", kNone);
      return c;
    };
    k.complete = [](const ka::ShapeKey&, const LaunchConfig& p) { return p; };
    k.can_run = [](const ka::ShapeKey&, const LaunchConfig&) { return ka::Status::ok(); };
    k.flop_count = [](const ka::ShapeKey&) { return 0.0; };
    k.byte_count = [](const ka::ShapeKey&) { return 0.0; };
    return k;
  }();
  return d;
}

void register_fault_kernel() {
  ka::extractor::Extractor::global()
      .registry(ka::DeviceType::kCPU)
      .add({"aten::relu", ka::DeviceType::kCPU, &fault_descriptor(), {&prepare_fault_relu, nullptr}});
}

// The stored form of the point with fault `f`.
std::string cfg(std::int64_t f) {
  LaunchConfig c;
  c.set("fault", f);
  return c.str();
}

class IsolatedTrials : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ka_isolation_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  ka::tuner::TuneOptions options() const {
    ka::tuner::TuneOptions o;
    o.op = "aten::relu";
    o.shapes = {"4096"};
    o.strategy = "exhaustive";
    o.db_path = (dir_ / "ka.db").string();
    o.measure.budget_s = 0.02;
    o.finalists = 1;
    o.isolate = true;
    o.trial_timeout_s = 2.0;
    o.progress = nullptr;
    return o;
  }

  // config (cfg(N)) -> (disposition, error) of the trials stored in `run`.
  std::map<std::string, std::pair<std::string, std::string>> trials(int run) const {
    ka::db::Connection db((dir_ / "ka.db").string());
    auto st = db.prepare("SELECT config, disposition, coalesce(error, '') FROM trials "
                         "WHERE run_id = ?1");
    st.bind(1, run);
    std::map<std::string, std::pair<std::string, std::string>> out;
    while (st.step()) out[st.column_text(0)] = {st.column_text(1), st.column_text(2)};
    return out;
  }

  fs::path dir_;
};

// Each fault is recorded with its own disposition and reason, and the sweep completes: the
// correct configuration is measured and recommended.
TEST_F(IsolatedTrials, EveryInjectedFaultIsRecordedAndTheSweepCompletes) {
  const auto out = ka::tuner::tune(options());
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].kernel, "fault_injection_relu");
  EXPECT_EQ(out[0].evaluated, 6U);
  EXPECT_EQ(out[0].failed, 5U);
  EXPECT_EQ(out[0].crashed, 3U);
  EXPECT_EQ(out[0].timed_out, 1U);
  EXPECT_EQ(out[0].best_config, "fault=0");

  const auto t = trials(1);
  ASSERT_EQ(t.size(), 6U);
  EXPECT_EQ(t.at(cfg(0)).first, "ok");
  EXPECT_EQ(t.at(cfg(1)).first, "crashed");
  // "killed by signal 11"; under AddressSanitizer, whose handler reports and exits, "exited".
  EXPECT_NE(t.at(cfg(1)).second.find("worker process"), std::string::npos)
      << t.at(cfg(1)).second;
  EXPECT_EQ(t.at(cfg(2)).first, "timeout");
  EXPECT_NE(t.at(cfg(2)).second.find("2 s"), std::string::npos) << t.at(cfg(2)).second;
  EXPECT_EQ(t.at(cfg(3)).first, "incorrect");
  EXPECT_EQ(t.at(cfg(4)).first, "crashed");
  // The worker that declared itself unusable was replaced: the finals after it ran.
  EXPECT_EQ(t.at(cfg(5)).first, "crashed");
  EXPECT_NE(t.at(cfg(5)).second.find("could run no more trials: test: the device is gone"),
            std::string::npos)
      << t.at(cfg(5)).second;

  ka::db::Connection db((dir_ / "ka.db").string());
  auto rec = db.prepare("SELECT config FROM recommendations WHERE kernel = 'fault_injection_relu'");
  ASSERT_TRUE(rec.step());
  EXPECT_EQ(rec.column_text(0), cfg(0));
  auto run = db.prepare("SELECT status FROM runs WHERE id = 1");
  ASSERT_TRUE(run.step());
  EXPECT_EQ(run.column_text(0), "complete");
}

// A resumed sweep keeps what crashed or timed out; --retry-failed runs exactly those again.
TEST_F(IsolatedTrials, ResumeKeepsFailuresAndRetryFailedRunsThemAgain) {
  (void)ka::tuner::tune(options());
  const auto resumed = ka::tuner::tune(options());
  EXPECT_EQ(resumed[0].evaluated, 0U);
  EXPECT_EQ(resumed[0].reused, 6U);
  EXPECT_EQ(resumed[0].best_config, "fault=0");  // the finals start a worker of their own

  auto retry = options();
  retry.retry_failed = true;
  const auto retried = ka::tuner::tune(retry);
  EXPECT_EQ(retried[0].reused, 2U);  // ok and incorrect: not failures of the run itself
  EXPECT_EQ(retried[0].evaluated, 4U);
  EXPECT_EQ(retried[0].crashed, 3U);
  EXPECT_EQ(retried[0].timed_out, 1U);
  const auto t = trials(3);
  ASSERT_EQ(t.size(), 4U);
  EXPECT_EQ(t.at(cfg(1)).first, "crashed");
  EXPECT_EQ(t.at(cfg(2)).first, "timeout");
  EXPECT_EQ(t.at(cfg(4)).first, "crashed");
}

// A stop signal while a trial is under way abandons it (its worker is killed), marks the run
// failed and surfaces as ka::Interrupted; the trials finished before are kept.
TEST_F(IsolatedTrials, ASignalDuringATrialStopsTheSweepAndMarksTheRun) {
  auto o = options();
  o.trial_timeout_s = 60.0;  // the spinning trial waits for the signal, not the deadline
  // The signal comes once the segfaulting trial is stored: the spinning one is next. The file
  // exists before the tuner has created its tables, so the signaller asks for the table first.
  const std::string db_path = o.db_path;
  std::thread signaller([db_path] {
    const auto segfault_trial_stored = [&db_path] {
      if (!fs::exists(db_path)) return false;
      ka::db::Connection db(db_path);
      auto table = db.prepare("SELECT count(*) FROM sqlite_master WHERE name = 'trials'");
      if (!table.step() || table.column_int64(0) == 0) return false;
      auto st = db.prepare("SELECT count(*) FROM trials WHERE config = '" + cfg(1) + "'");
      return st.step() && st.column_int64(0) == 1;
    };
    for (int i = 0; i < 600 && !segfault_trial_stored(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    std::raise(SIGTERM);
  });
  const auto start = std::chrono::steady_clock::now();
  int signal_number = 0;
  try {
    (void)ka::tuner::tune(o);
  } catch (const ka::Interrupted& e) {
    signal_number = e.signal_number();
  }
  signaller.join();
  EXPECT_EQ(signal_number, SIGTERM);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(55));
  ka::db::Connection db((dir_ / "ka.db").string());
  auto run = db.prepare("SELECT status FROM runs WHERE id = 1");
  ASSERT_TRUE(run.step());
  EXPECT_EQ(run.column_text(0), "failed");
  const auto t = trials(1);
  EXPECT_EQ(t.count(cfg(2)), 0U);  // the abandoned trial is not stored
  EXPECT_EQ(t.at(cfg(0)).first, "ok");
}

}  // namespace

int main(int argc, char** argv) {
  register_fault_kernel();
  ka::tuner::serve_trial_worker_if_asked();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
