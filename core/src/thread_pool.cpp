#include <ka/core/cpu_cores.hpp>
#include <ka/core/spin.hpp>
#include <ka/core/thread_pool.hpp>

#include <algorithm>

namespace ka {
namespace {
thread_local bool t_inside_pool = false;
}  // namespace

ThreadPool::ThreadPool(int max_threads) {
  const int workers = std::max(0, max_threads - 1);
  workers_.reserve(static_cast<std::size_t>(workers));
  for (int i = 0; i < workers; ++i) {
    workers_.emplace_back([this, i] { worker_loop(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) {
    w.join();
  }
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(usable_cores());
  return pool;
}

// Note [Wait only for started blocks]
// A worker claims a block under mutex_, counting it in `running_`, and a caller returns once
// every block was claimed and `running_` is back to zero. It never waits for a worker that
// has not woken: the caller claims blocks too, so a worker that wakes late (a futex wake
// in a guest VM can take tens of microseconds, as long as a small GEMM) finds every block
// taken and goes back to waiting, and the call costs what one thread's run costs. A late
// worker cannot run a block of a finished call, since it claims under the same mutex and
// the caller clears the job (n_ = 0) before it returns.
void ThreadPool::run_indices() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (next_ < n_ && !error_) {
    const std::int64_t index = next_++;
    const auto* fn = fn_;
    running_.fetch_add(1, std::memory_order_relaxed);
    lock.unlock();
    std::exception_ptr failure;
    try {
      (*fn)(index);
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    if (failure && !error_) {
      error_ = failure;
    }
    // Release: the block's writes are visible to a caller that reads running_ == 0.
    running_.fetch_sub(1, std::memory_order_release);
  }
  if (running_.load(std::memory_order_relaxed) == 0) {
    done_.notify_one();
  }
}

// Note [Spin then sleep]
// Waking a thread blocked on a condition variable takes tens of microseconds, as long as a
// small GEMM. Benchmarks and graph runs call the pool back to back, so a worker first spins
// (with a pause hint) for about a hundred microseconds watching `generation_`, and only then
// sleeps; a caller whose last blocks are still running on workers spins the same way before
// it sleeps. The spins are bounded, so an idle pool costs no CPU.
constexpr int kSpinIterations = 20000;

void ThreadPool::worker_loop(int worker_index) {
  t_inside_pool = true;
  std::uint64_t seen = 0;
  while (true) {
    for (int spin = 0; spin < kSpinIterations &&
                       generation_.load(std::memory_order_acquire) == seen;
         ++spin) {
      pause_hint();
    }
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] {
        return stop_ || (generation_ != seen && worker_index < helpers_wanted_);
      });
      if (stop_) {
        return;
      }
      seen = generation_.load(std::memory_order_relaxed);
    }
    run_indices();
  }
}

std::exception_ptr ThreadPool::finish_call() {
  for (int spin = 0; spin < kSpinIterations && running_.load(std::memory_order_acquire) != 0;
       ++spin) {
    pause_hint();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return running_.load(std::memory_order_acquire) == 0; });
  // helpers_wanted_ stays: a wanted worker that wakes now joins, finds no block, and goes
  // back to spinning, in time for the next call.
  fn_ = nullptr;
  n_ = 0;
  next_ = 0;
  std::exception_ptr error = error_;
  error_ = nullptr;
  return error;
}

void ThreadPool::parallel_for(std::int64_t n, int threads,
                              const std::function<void(std::int64_t)>& fn) {
  if (n <= 0) {
    return;
  }
  const int want = static_cast<int>(
      std::min<std::int64_t>({static_cast<std::int64_t>(std::max(threads, 1)),
                              static_cast<std::int64_t>(max_threads()), n}));
  if (want == 1 || t_inside_pool) {
    for (std::int64_t i = 0; i < n; ++i) {
      fn(i);
    }
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fn_ = &fn;
    n_ = n;
    next_ = 0;
    error_ = nullptr;
    helpers_wanted_ = want - 1;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  t_inside_pool = true;
  run_indices();
  t_inside_pool = false;
  // Every block is claimed (or one failed): Note [Wait only for started blocks].
  const std::exception_ptr error = finish_call();
  if (error) {
    std::rethrow_exception(error);
  }
}

}  // namespace ka
