#include <ka/core/error.hpp>
#include <ka/core/thread_pool.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

namespace ka {
namespace {

TEST(ThreadPool, RunsEveryIndexExactlyOnce) {
  ThreadPool pool(4);
  for (const std::int64_t n : {0, 1, 3, 100, 1001}) {
    for (const int threads : {1, 2, 4, 16}) {
      std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
      pool.parallel_for(n, threads, [&](std::int64_t i) { hits[static_cast<std::size_t>(i)]++; });
      for (std::int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(hits[static_cast<std::size_t>(i)].load(), 1) << "n=" << n << " i=" << i;
      }
    }
  }
}

TEST(ThreadPool, UsesSeveralThreads) {
  ThreadPool pool(3);
  std::mutex m;
  std::set<std::thread::id> ids;
  std::atomic<int> arrived{0};
  pool.parallel_for(3, 3, [&](std::int64_t) {
    {
      std::lock_guard<std::mutex> lock(m);
      ids.insert(std::this_thread::get_id());
    }
    // Hold every block until all three started, so each runs on its own thread.
    arrived++;
    while (arrived.load() < 3) std::this_thread::yield();
  });
  EXPECT_EQ(ids.size(), 3U);
}

TEST(ThreadPool, RethrowsTheFirstException) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(50, 2,
                                 [](std::int64_t i) {
                                   if (i == 7) KA_THROW(ValueError, "block 7 failed");
                                 }),
               ValueError);
  // The pool is still usable afterwards.
  std::atomic<int> count{0};
  pool.parallel_for(10, 2, [&](std::int64_t) { count++; });
  EXPECT_EQ(count.load(), 10);
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(2);
  std::atomic<int> count{0};
  pool.parallel_for(4, 2, [&](std::int64_t) {
    pool.parallel_for(5, 2, [&](std::int64_t) { count++; });
  });
  EXPECT_EQ(count.load(), 20);
}

TEST(ThreadPool, ConcurrentCallersAreSerialised) {
  ThreadPool pool(2);
  std::atomic<int> count{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int r = 0; r < 50; ++r) pool.parallel_for(8, 2, [&](std::int64_t) { count++; });
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(count.load(), 4 * 50 * 8);
}

// Calls with gaps long enough for the workers to fall asleep, and calls back to back: a call
// returns only after each of its blocks ran exactly once, and no block runs after its call
// returned (a worker that wakes late must not run a block of a finished call).
TEST(ThreadPool, LateWorkersRunNoBlockOfAFinishedCall) {
  ThreadPool pool(3);
  std::atomic<int> after_return{0};
  for (int call = 0; call < 600; ++call) {
    const std::int64_t n = 1 + call % 5;
    std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
    std::atomic<bool> live{true};
    pool.parallel_for(n, 3, [&](std::int64_t i) {
      if (!live.load()) after_return++;
      hits[static_cast<std::size_t>(i)]++;
    });
    live = false;
    for (std::int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(hits[static_cast<std::size_t>(i)].load(), 1) << "call " << call << " block " << i;
    }
    if (call % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(after_return.load(), 0);
}

}  // namespace
}  // namespace ka
