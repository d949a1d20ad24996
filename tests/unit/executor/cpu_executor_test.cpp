// The CPU executor: hazards order tasks, independent tasks overlap, errors stop dependents.
#include <ka/core/error.hpp>
#include <ka/executor/cpu_executor.hpp>
#include <ka/executor/cuda_executor.hpp>
#include <ka/kernels/cpu_launch.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace ka::executor {
namespace {

// A block that sleeps, then records when it finished, and writes into a shared buffer.
struct Probe {
  std::atomic<int>* clock;        // global order counter
  std::atomic<int>* start_stamp;  // first block's start order
  std::atomic<int>* end_stamp;    // last block's end order
  std::vector<float>* buffer;
  float value;
  int sleep_us;
};

void probe_block(const Probe& p, std::int64_t block) {
  int expected = -1;
  p.start_stamp->compare_exchange_strong(expected, p.clock->fetch_add(1));
  std::this_thread::sleep_for(std::chrono::microseconds(p.sleep_us));
  (*p.buffer)[static_cast<std::size_t>(block)] = p.value;
  p.end_stamp->store(p.clock->fetch_add(1));
}

MemRange range_of(const std::vector<float>& v, Access access) {
  return MemRange{Device::cpu(), reinterpret_cast<std::uintptr_t>(v.data()),
                  v.size() * sizeof(float), access};
}

KernelTask probe_task(const Probe& p, std::int64_t blocks, int threads,
                      std::vector<MemRange> ranges, const char* label) {
  KernelTask t;
  t.device = Device::cpu();
  t.label = label;
  t.ranges = std::move(ranges);
  t.cpu.bind<Probe, &probe_block>(p, blocks, threads);
  return t;
}

struct Stamps {
  std::atomic<int> start{-1};
  std::atomic<int> end{-1};
};

TEST(CpuExecutor, ReadAfterWriteWaitsForTheWriter) {
  CpuExecutor ex(2);
  std::atomic<int> clock{0};
  std::vector<float> x(4, 0.0F), y(4, 0.0F);
  Stamps w, r;
  // The writer is slow; if the reader ran early it would start before the writer ended.
  const auto a = ex.submit(probe_task({&clock, &w.start, &w.end, &x, 1.0F, 3000}, 4, 2,
                                      {range_of(x, Access::kWrite)}, "writer"));
  const auto b = ex.submit(probe_task({&clock, &r.start, &r.end, &y, 2.0F, 10}, 4, 2,
                                      {range_of(x, Access::kRead), range_of(y, Access::kWrite)},
                                      "reader"));
  ex.wait_all();
  EXPECT_GT(r.start.load(), w.end.load());
  EXPECT_EQ(ex.dependencies_of(b), std::vector<std::uint64_t>{a});
  EXPECT_TRUE(ex.dependencies_of(a).empty());
}

TEST(CpuExecutor, WriteAfterReadAndWriteAfterWriteWait) {
  CpuExecutor ex(2);
  std::atomic<int> clock{0};
  std::vector<float> x(2, 0.0F), scratch(2, 0.0F), scratch2(2, 0.0F);
  Stamps reader, writer, writer2;
  ex.submit(probe_task({&clock, &reader.start, &reader.end, &scratch, 1.0F, 3000}, 2, 2,
                       {range_of(x, Access::kRead), range_of(scratch, Access::kWrite)}, "r"));
  ex.submit(probe_task({&clock, &writer.start, &writer.end, &x, 2.0F, 2000}, 2, 2,
                       {range_of(x, Access::kWrite)}, "w"));
  ex.submit(probe_task({&clock, &writer2.start, &writer2.end, &x, 3.0F, 10}, 2, 2,
                       {range_of(x, Access::kWrite)}, "w2"));
  ex.wait_all();
  EXPECT_GT(writer.start.load(), reader.end.load());   // WAR
  EXPECT_GT(writer2.start.load(), writer.end.load());  // WAW
  EXPECT_EQ(x[0], 3.0F);
  EXPECT_EQ(x[1], 3.0F);
}

TEST(CpuExecutor, IndependentTasksOverlap) {
  CpuExecutor ex(2);
  std::atomic<int> clock{0};
  std::vector<float> a(1, 0.0F), b(1, 0.0F);
  Stamps sa, sb;
  // One block each, one thread each: they can only overlap by running on two threads.
  ex.submit(probe_task({&clock, &sa.start, &sa.end, &a, 1.0F, 20000}, 1, 1,
                       {range_of(a, Access::kWrite)}, "a"));
  ex.submit(probe_task({&clock, &sb.start, &sb.end, &b, 1.0F, 20000}, 1, 1,
                       {range_of(b, Access::kWrite)}, "b"));
  ex.wait_all();
  EXPECT_LT(sb.start.load(), sa.end.load()) << "b started only after a ended";
  EXPECT_LT(sa.start.load(), sb.end.load());
}

TEST(CpuExecutor, PriorityPicksAmongReadyTasks) {
  CpuExecutor ex(1);  // the waiting caller alone: strict order
  std::atomic<int> clock{0};
  std::vector<float> a(1), b(1);
  Stamps low, high;
  KernelTask t1 = probe_task({&clock, &low.start, &low.end, &a, 1.0F, 10}, 1, 1,
                             {range_of(a, Access::kWrite)}, "low");
  KernelTask t2 = probe_task({&clock, &high.start, &high.end, &b, 1.0F, 10}, 1, 1,
                             {range_of(b, Access::kWrite)}, "high");
  t2.priority = 5;
  ex.submit(std::move(t1));
  ex.submit(std::move(t2));
  ex.wait_all();
  EXPECT_LT(high.end.load(), low.start.load());
}

void failing_block(const int& /*unused*/, std::int64_t /*block*/) {
  throw ValueError("block failed on purpose");
}

TEST(CpuExecutor, AFailedTaskFailsItsDependentsWithoutRunningThem) {
  CpuExecutor ex(2);
  std::vector<float> x(2, 0.0F), y(2, 0.0F);
  KernelTask bad;
  bad.device = Device::cpu();
  bad.label = "bad";
  bad.ranges = {range_of(x, Access::kWrite)};
  bad.cpu.bind<int, &failing_block>(0, 3, 2);
  std::atomic<int> clock{0};
  Stamps dep;
  // One batch: with two submits the bad task may fail and finish before the second submit,
  // which then has nothing left to depend on (dependencies are on unfinished tasks).
  std::vector<KernelTask> batch;
  batch.push_back(std::move(bad));
  batch.push_back(probe_task({&clock, &dep.start, &dep.end, &y, 1.0F, 10}, 2, 1,
                             {range_of(x, Access::kRead), range_of(y, Access::kWrite)},
                             "dependent"));
  const auto ids = ex.submit_batch(std::move(batch));
  const auto id_bad = ids[0];
  const auto id_dep = ids[1];
  EXPECT_THROW(ex.wait(id_dep), ValueError);
  EXPECT_EQ(dep.start.load(), -1) << "the dependent ran on the output of a failed task";
  EXPECT_THROW(ex.wait(id_bad), ValueError);
  EXPECT_NO_THROW(ex.wait_all());
  EXPECT_EQ(ex.in_flight(), 0U);
}

// A split launch (CpuLaunch::bind_split): blocks write their slots of the scratch, the finish
// phase runs once, after every block, and sees all of them; a dependent runs after it.
struct SplitJob {
  std::atomic<int>* finishes;
  std::atomic<int>* blocks_done;
  std::atomic<int>* done_at_finish;  // blocks done when finish ran
  double* total;
  bool fail;
};

void split_block(const SplitJob& j, std::int64_t block, double* scratch) {
  if (j.fail && block == 2) throw ValueError("split block failed on purpose");
  std::this_thread::sleep_for(std::chrono::microseconds(200));
  scratch[block] = static_cast<double>(block + 1);
  j.blocks_done->fetch_add(1);
}

void split_finish(const SplitJob& j, const double* scratch) {
  j.done_at_finish->store(j.blocks_done->load());
  double t = 0.0;
  for (int b = 0; b < 8; ++b) t += scratch[b];
  *j.total = t;
  j.finishes->fetch_add(1);
}

TEST(CpuExecutor, SplitLaunchFinishesOnceAfterEveryBlock) {
  for (const int workers : {1, 2, 3}) {
    CpuExecutor ex(workers);
    std::atomic<int> finishes{0};
    std::atomic<int> done{0};
    std::atomic<int> done_at_finish{-1};
    double total = 0.0;
    std::vector<float> out(1), after(1);
    KernelTask t;
    t.device = Device::cpu();
    t.label = "split";
    t.ranges = {range_of(out, Access::kWrite)};
    t.cpu.bind_split<SplitJob, &split_block, &split_finish>(
        {&finishes, &done, &done_at_finish, &total, false}, 8, 3);
    std::atomic<int> clock{0};
    Stamps dep;
    std::vector<KernelTask> batch;
    batch.push_back(std::move(t));
    batch.push_back(probe_task({&clock, &dep.start, &dep.end, &after, 1.0F, 10}, 1, 1,
                               {range_of(out, Access::kRead), range_of(after, Access::kWrite)},
                               "reads the split's output"));
    ex.submit_batch(std::move(batch));
    ex.wait_all();
    EXPECT_EQ(finishes.load(), 1) << workers << " workers";
    EXPECT_EQ(done_at_finish.load(), 8) << workers << " workers";
    EXPECT_EQ(total, 36.0) << workers << " workers";
    EXPECT_NE(dep.start.load(), -1);
  }
  // run_on_pool (the direct entry points) runs the finish phase too.
  std::atomic<int> finishes{0};
  std::atomic<int> done{0};
  std::atomic<int> done_at_finish{-1};
  double total = 0.0;
  kernels::CpuLaunch launch;
  launch.bind_split<SplitJob, &split_block, &split_finish>(
      {&finishes, &done, &done_at_finish, &total, false}, 8, 2);
  kernels::run_on_pool(launch);
  EXPECT_EQ(finishes.load(), 1);
  EXPECT_EQ(total, 36.0);
  // A failed block: no finish, and the error reaches the waiter.
  CpuExecutor ex(2);
  finishes = 0;
  KernelTask bad;
  bad.device = Device::cpu();
  bad.label = "split, failing";
  bad.cpu.bind_split<SplitJob, &split_block, &split_finish>(
      {&finishes, &done, &done_at_finish, &total, true}, 8, 2);
  const auto id = ex.submit(std::move(bad));
  EXPECT_THROW(ex.wait(id), ValueError);
  EXPECT_EQ(finishes.load(), 0);
}

TEST(CpuExecutor, ManyTasksOnOneBufferRunInSubmissionOrder) {
  CpuExecutor ex(2);
  std::vector<float> x(8, 0.0F);
  std::atomic<int> clock{0};
  std::vector<Stamps> stamps(20);
  for (int i = 0; i < 20; ++i) {
    ex.submit(probe_task({&clock, &stamps[static_cast<std::size_t>(i)].start,
                          &stamps[static_cast<std::size_t>(i)].end, &x, static_cast<float>(i), 50},
                         8, 2, {range_of(x, Access::kReadWrite)}, "rw"));
  }
  ex.wait_all();
  for (std::size_t i = 1; i < stamps.size(); ++i) {
    EXPECT_GT(stamps[i].start.load(), stamps[i - 1].end.load()) << i;
  }
  for (float v : x) EXPECT_EQ(v, 19.0F);
}

TEST(CpuExecutor, FinishedSingleBlockTasksLeaveNoDanglingReadyEntries) {
  // A one-block task is finished (and freed) right after its block: the ready list must not
  // keep it (the ASan build turns a dangling entry into a use-after-free report).
  CpuExecutor ex(2);
  std::atomic<int> clock{0};
  std::vector<std::vector<float>> bufs(64, std::vector<float>(1, 0.0F));
  std::vector<Stamps> stamps(bufs.size() * 4);
  for (int round = 0; round < 4; ++round) {
    std::vector<KernelTask> batch;
    for (std::size_t i = 0; i < bufs.size(); ++i) {
      Stamps& st = stamps[static_cast<std::size_t>(round) * bufs.size() + i];
      batch.push_back(probe_task({&clock, &st.start, &st.end, &bufs[i], static_cast<float>(round), 0},
                                 1, 1, {range_of(bufs[i], Access::kReadWrite)}, "one block"));
    }
    ex.submit_batch(std::move(batch));
  }
  ex.wait_all();
  for (const auto& b : bufs) EXPECT_EQ(b[0], 3.0F);
  EXPECT_EQ(ex.in_flight(), 0U);
}

// Note [Waking helpers]: the thread that finishes a one-block task runs the next one itself,
// so a chain run by run_batch wakes no other thread (it woke one per task).
TEST(CpuExecutor, RunBatchRunsAChainWithoutWakingAThread) {
  CpuExecutor ex(3);
  std::atomic<int> clock{0};
  std::vector<float> x(1, 0.0F);
  std::vector<Stamps> stamps(50);
  std::vector<KernelTask> chain;
  for (std::size_t i = 0; i < stamps.size(); ++i) {
    chain.push_back(probe_task({&clock, &stamps[i].start, &stamps[i].end, &x,
                                static_cast<float>(i), 0},
                               1, 1, {range_of(x, Access::kReadWrite)}, "link"));
  }
  const std::uint64_t before = ex.wakes();
  ex.run_batch(std::move(chain));
  EXPECT_EQ(ex.wakes(), before);
  EXPECT_EQ(x[0], 49.0F);
  for (std::size_t i = 1; i < stamps.size(); ++i) {
    EXPECT_GT(stamps[i].start.load(), stamps[i - 1].end.load()) << i;
  }
}

// Blocks that each wait for every other block of their task, as a kernel whose threads meet at
// a barrier would: the task finishes only if as many threads as it may use run it at once.
struct Meeting {
  std::atomic<int>* arrived;
  int blocks;
  std::atomic<bool>* met_all;
};

void meet_block(const Meeting& m, std::int64_t /*block*/) {
  m.arrived->fetch_add(1);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (m.arrived->load() < m.blocks) {
    if (std::chrono::steady_clock::now() > give_up) {
      m.met_all->store(false);
      return;
    }
    std::this_thread::yield();
  }
}

KernelTask meeting_task(const Meeting& m) {
  KernelTask t;
  t.device = Device::cpu();
  t.label = "meeting";
  t.cpu.bind<Meeting, &meet_block>(m, m.blocks, m.blocks);
  return t;
}

// However the ready blocks appear (submitted with the caller helping or not, made ready by a
// task that finishes on another thread), every thread they may use is woken for them.
TEST(CpuExecutor, ReadyBlocksWakeTheThreadsTheyMayUse) {
  for (int threads : {2, 3}) {
    CpuExecutor ex(threads);
    std::atomic<int> arrived{0};
    std::atomic<bool> met{true};
    const Meeting m{&arrived, threads, &met};
    std::vector<KernelTask> batch;
    batch.push_back(meeting_task(m));
    ex.run_batch(std::move(batch));
    EXPECT_TRUE(met.load()) << threads << " threads, run_batch";

    arrived = 0;
    ex.wait(ex.submit(meeting_task(m)));
    EXPECT_TRUE(met.load()) << threads << " threads, submit then wait";

    // A one-block task before it on the same buffer: the meeting becomes ready when that task
    // finishes, on whichever thread ran it.
    arrived = 0;
    std::atomic<int> clock{0};
    std::vector<float> x(1, 0.0F);
    Stamps st;
    KernelTask first = probe_task({&clock, &st.start, &st.end, &x, 1.0F, 100}, 1, 1,
                                  {range_of(x, Access::kWrite)}, "first");
    KernelTask second = meeting_task(m);
    second.ranges = {range_of(x, Access::kRead)};
    std::vector<KernelTask> pair;
    pair.push_back(std::move(first));
    pair.push_back(std::move(second));
    ex.submit_batch(std::move(pair));
    ex.wait_all();
    EXPECT_TRUE(met.load()) << threads << " threads, made ready by a finishing task";
  }
}

// Note [Light ready work]: independent one-thread tasks on a few bytes each are run by the
// thread that made them ready, without waking another; the same tasks on a megabyte each (or
// more of them than kLightTasks) get a helper each, and their blocks meet.
KernelTask meeting_one(const Meeting& m, const std::vector<float>& buffer) {
  KernelTask t;
  t.device = Device::cpu();
  t.label = "meeting one";
  t.ranges = {range_of(buffer, Access::kReadWrite)};
  t.cpu.bind<Meeting, &meet_block>(m, 1, 1);
  return t;
}

TEST(CpuExecutor, LightIndependentTasksWakeNoThreadHeavyOnesMeet) {
  CpuExecutor ex(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the worker asleep
  std::atomic<int> clock{0};
  std::vector<std::vector<float>> small(4, std::vector<float>(16, 0.0F));
  std::vector<Stamps> stamps(small.size());
  std::vector<KernelTask> light;
  for (std::size_t i = 0; i < small.size(); ++i) {
    light.push_back(probe_task({&clock, &stamps[i].start, &stamps[i].end, &small[i], 1.0F, 0}, 1,
                               1, {range_of(small[i], Access::kReadWrite)}, "light"));
  }
  const std::uint64_t before = ex.wakes();
  ex.run_batch(std::move(light));
  EXPECT_EQ(ex.wakes(), before);
  for (const auto& b : small) EXPECT_EQ(b[0], 1.0F);

  // Two tasks of 1 MiB each, each of whose one block waits for the other's: they finish only
  // if a second thread is woken for one of them.
  std::vector<std::vector<float>> big(2, std::vector<float>(std::size_t{1} << 18, 0.0F));
  std::atomic<int> arrived{0};
  std::atomic<bool> met{true};
  const Meeting m{&arrived, 2, &met};
  std::vector<KernelTask> heavy;
  for (const auto& b : big) heavy.push_back(meeting_one(m, b));
  ex.run_batch(std::move(heavy));
  EXPECT_TRUE(met.load());
}


// Fails the test (and aborts: a hung executor cannot be destroyed) if it is not destroyed
// within `limit`.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit)
      : thread_([this, limit] {
          std::unique_lock<std::mutex> lock(mutex_);
          if (!cv_.wait_for(lock, limit, [&] { return done_; })) {
            ADD_FAILURE() << "still running after " << limit.count() << " s: a hand-off was lost";
            std::fflush(nullptr);
            std::abort();
          }
        }) {}
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// Note [Spinning before sleeping]: whatever the spin, a thread that stops spinning just as
// work appears or the last task finishes is not left asleep. Hand-offs by the thousand, with
// spins of no time (the window is widest), a microsecond and the default: a meeting task
// needs every thread woken, and wait_all must see the end. A lost wake-up would hang; the
// watchdog turns that into a failure.
TEST(CpuExecutor, NoHandOffIsLostWhateverTheSpin) {
  const Watchdog watchdog(std::chrono::seconds(120));
  for (const auto spin : {std::chrono::microseconds{0}, std::chrono::microseconds{1},
                          CpuExecutor::kDefaultSpin}) {
    for (int threads : {2, 3}) {
      CpuExecutor ex(threads, spin);
      std::vector<float> x(1, 0.0F);
      for (int round = 0; round < 1500; ++round) {
        std::atomic<int> clock{0};
        Stamps st;
        std::atomic<int> arrived{0};
        std::atomic<bool> met{true};
        const Meeting meeting{&arrived, threads, &met};
        std::vector<KernelTask> batch;
        batch.push_back(probe_task({&clock, &st.start, &st.end, &x, static_cast<float>(round), 0},
                                   1, 1, {range_of(x, Access::kWrite)}, "write"));
        KernelTask meet = meeting_task(meeting);
        meet.ranges = {range_of(x, Access::kRead)};
        batch.push_back(std::move(meet));
        if (round % 2 == 0) {
          ex.run_batch(std::move(batch));
        } else {
          ex.submit_batch(std::move(batch));
          ex.wait_all();
        }
        ASSERT_TRUE(met.load()) << "spin " << spin.count() << " us, " << threads
                                << " threads, round " << round;
        ASSERT_EQ(x[0], static_cast<float>(round));
      }
    }
  }
}


// The default executor follows the CPU kernels' thread limit (ka-bench --threads N caps graph
// runs with it); an explicit count is kept.
TEST(CpuExecutor, DefaultThreadsFollowTheKernelsThreadLimit) {
  kernels::set_cpu_thread_limit(1);
  const int one = CpuExecutor().threads();
  kernels::set_cpu_thread_limit(0);  // back to KA_NUM_THREADS or every core
  EXPECT_EQ(one, 1);
  EXPECT_EQ(CpuExecutor().threads(), kernels::cpu_thread_limit());
  EXPECT_EQ(CpuExecutor(3).threads(), 3);
}

TEST(CpuExecutor, RejectsTasksForOtherDevices) {
  CpuExecutor ex(1);
  KernelTask t;
  t.device = Device::cuda(0);
  t.label = "gpu task";
  EXPECT_THROW(ex.submit(std::move(t)), ValueError);
}

TEST(CudaExecutor, SkipsOrRunsWithAReason) {
  std::string why;
  if (!cuda_device_available(&why)) {
    EXPECT_FALSE(why.empty());
    GTEST_SKIP() << "no CUDA device: " << why;
  }
  CudaExecutor ex(Device::cuda(0));
  ex.synchronize();
}

}  // namespace
}  // namespace ka::executor
