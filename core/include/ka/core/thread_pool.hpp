// ThreadPool: runs the blocks of a CPU "grid" on persistent worker threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ka {

/// A fixed set of worker threads that execute index ranges. The calling thread takes part in
/// the work, so `parallel_for(n, 1, fn)` runs inline with no synchronisation. Calls from
/// several threads are serialised; a call from inside a worker runs inline (no deadlock).
///
///   ThreadPool::global().parallel_for(tiles, /*threads=*/2, [&](std::int64_t t) { run(t); });
class ThreadPool {
 public:
  /// A pool able to run `max_threads` threads at once (the caller plus max_threads-1 workers).
  explicit ThreadPool(int max_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// The process-wide pool, sized to the hardware's logical cores.
  static ThreadPool& global();

  [[nodiscard]] int max_threads() const noexcept { return static_cast<int>(workers_.size()) + 1; }

  /// Calls fn(i) for every i in [0, n) on up to `threads` threads (clamped to [1, max_threads]).
  /// Blocks until all calls returned; rethrows the first exception one of them threw.
  void parallel_for(std::int64_t n, int threads, const std::function<void(std::int64_t)>& fn);

 private:
  void worker_loop(int worker_index);
  void run_indices();
  // Waits for the blocks still running on workers, clears the job, returns its first error.
  std::exception_ptr finish_call();

  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  // The current job, guarded by mutex_ (the index counter is shared under it too: the
  // critical section is a few instructions per block, and blocks are large).
  const std::function<void(std::int64_t)>* fn_ = nullptr;
  std::int64_t n_ = 0;
  std::int64_t next_ = 0;
  int helpers_wanted_ = 0;  // workers that may join this job
  // Written under mutex_, read without it by spinning threads. See Note [Spin then sleep]
  // and Note [Wait only for started blocks].
  std::atomic<int> running_{0};  // blocks claimed and not yet returned
  std::atomic<std::uint64_t> generation_{0};
  std::exception_ptr error_;
  bool stop_ = false;
};

}  // namespace ka
