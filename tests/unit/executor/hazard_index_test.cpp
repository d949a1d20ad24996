// The executor's hazard tracking scales with the tasks and their dependencies, not with the
// square of the tasks in flight (issue 21: a graph of 100k independent adds took minutes), and
// a failure down a long chain of tasks does not recurse per task.
#include <ka/core/error.hpp>
#include <ka/executor/cpu_executor.hpp>
#include <ka/kernels/cpu_launch.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace ka::executor {
namespace {

// dst[0] = src[0] + 1.
struct AddOne {
  const float* src;
  float* dst;
};
void add_one_block(const AddOne& a, std::int64_t /*block*/) { a.dst[0] = a.src[0] + 1.0F; }
void failing_block(const int& /*unused*/, std::int64_t /*block*/) {
  throw ValueError("block failed on purpose");
}

MemRange range_of(const float* p, Access access) {
  return MemRange{Device::cpu(), reinterpret_cast<std::uintptr_t>(p), sizeof(float), access};
}

KernelTask add_one_task(const float* src, float* dst) {
  KernelTask t;
  t.device = Device::cpu();
  t.label = "add_one";
  t.ranges = {range_of(src, Access::kRead), range_of(dst, Access::kWrite)};
  t.cpu.bind<AddOne, &add_one_block>(AddOne{src, dst}, 1, 1);
  return t;
}

// Separate allocations, like the tensors of a graph.
std::vector<std::unique_ptr<float>> buffers(std::size_t n) {
  std::vector<std::unique_ptr<float>> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(std::make_unique<float>(0.0F));
  return out;
}

// Range comparisons to submit and run n tasks that all read one input and each write its own
// output, as a graph of n independent adds does.
std::uint64_t independent_comparisons(std::size_t n) {
  CpuExecutor ex(2);
  const float x = 41.0F;
  auto out = buffers(n);
  std::vector<KernelTask> batch;
  for (std::size_t i = 0; i < n; ++i) batch.push_back(add_one_task(&x, out[i].get()));
  const std::vector<std::uint64_t> ids = ex.submit_batch(std::move(batch));
  ex.wait_all();
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_EQ(*out[i], 42.0F) << i;
    EXPECT_TRUE(ex.dependencies_of(ids[i]).empty()) << i;  // ids are recent enough for n <= 4096
    if (::testing::Test::HasFailure()) break;
  }
  return ex.hazard_comparisons();
}

// The same for a chain: task i reads task i-1's output.
std::uint64_t chain_comparisons(std::size_t n) {
  CpuExecutor ex(2);
  auto v = buffers(n + 1);
  std::vector<KernelTask> batch;
  for (std::size_t i = 0; i < n; ++i) batch.push_back(add_one_task(v[i].get(), v[i + 1].get()));
  const std::vector<std::uint64_t> ids = ex.submit_batch(std::move(batch));
  ex.wait_all();
  EXPECT_EQ(*v[n], static_cast<float>(n));  // every task ran after the one before it
  for (std::size_t i = 1; i < n; ++i) {
    EXPECT_EQ(ex.dependencies_of(ids[i]), std::vector<std::uint64_t>{ids[i - 1]}) << i;
    if (::testing::Test::HasFailure()) break;
  }
  return ex.hazard_comparisons();
}

// Comparing every task with every task in flight would make these n^2/2: 2,000,000 at
// n = 2000, and four times that at 2n. The index visits a bounded number of ranges per task.
TEST(HazardIndex, IndependentTasksCostLinearComparisons) {
  const std::uint64_t at_n = independent_comparisons(2000);
  const std::uint64_t at_2n = independent_comparisons(4000);
  EXPECT_LE(at_n, 8U * 2000U);
  EXPECT_LE(at_2n, 8U * 4000U);
  EXPECT_LE(static_cast<double>(at_2n), 2.5 * static_cast<double>(at_n));
}

TEST(HazardIndex, ChainsCostLinearComparisonsAndKeepTheirOrder) {
  const std::uint64_t at_n = chain_comparisons(2000);
  const std::uint64_t at_2n = chain_comparisons(4000);
  EXPECT_LE(at_n, 8U * 2000U);
  EXPECT_LE(at_2n, 8U * 4000U);
  EXPECT_LE(static_cast<double>(at_2n), 2.5 * static_cast<double>(at_n));
}

TEST(HazardIndex, PartialOverlapsStillOrderTasks) {
  // A write of floats [2, 6) must wait for a read of [0, 4) and a write of [5, 8).
  CpuExecutor ex(2);
  std::vector<float> buf(8, 0.0F);
  const auto at = [&](std::size_t first, std::size_t count, Access access) {
    return MemRange{Device::cpu(), reinterpret_cast<std::uintptr_t>(buf.data() + first),
                    count * sizeof(float), access};
  };
  const auto task = [&](std::vector<MemRange> ranges) {
    KernelTask t;
    t.device = Device::cpu();
    t.ranges = std::move(ranges);
    return t;  // no blocks: finishes once its dependencies have
  };
  std::vector<KernelTask> batch;
  batch.push_back(task({at(0, 4, Access::kRead)}));
  batch.push_back(task({at(5, 3, Access::kWrite)}));
  batch.push_back(task({at(4, 1, Access::kRead)}));  // conflicts with nothing
  batch.push_back(task({at(2, 4, Access::kWrite)}));
  const auto ids = ex.submit_batch(std::move(batch));
  ex.wait_all();
  EXPECT_TRUE(ex.dependencies_of(ids[2]).empty());
  EXPECT_EQ(ex.dependencies_of(ids[3]), (std::vector<std::uint64_t>{ids[0], ids[1], ids[2]}));
}

TEST(HazardIndex, AFailureDownALongChainDoesNotRecursePerTask) {
  // Finishing a failed task's dependents recursively took a stack frame per task: 200,000
  // of them overflow the 8 MiB main-thread stack.
  constexpr std::size_t kTasks = 200000;
  CpuExecutor ex(1);
  auto v = buffers(kTasks + 1);
  std::vector<KernelTask> batch;
  KernelTask bad;
  bad.device = Device::cpu();
  bad.label = "bad";
  bad.ranges = {range_of(v[0].get(), Access::kWrite)};
  bad.cpu.bind<int, &failing_block>(0, 1, 1);
  batch.push_back(std::move(bad));
  for (std::size_t i = 0; i < kTasks; ++i) batch.push_back(add_one_task(v[i].get(), v[i + 1].get()));
  ex.submit_batch(std::move(batch));
  EXPECT_THROW(ex.wait_all(), ValueError);
  EXPECT_EQ(ex.in_flight(), 0U);
  EXPECT_EQ(*v[kTasks], 0.0F) << "a task ran on the output of a failed one";
}

}  // namespace
}  // namespace ka::executor
