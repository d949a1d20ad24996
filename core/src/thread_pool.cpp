#include <ka/core/cpu_cores.hpp>
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

void ThreadPool::run_indices() {
  while (true) {
    std::int64_t index = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (next_ >= n_ || error_) {
        return;
      }
      index = next_++;
    }
    try {
      (*fn_)(index);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) {
        error_ = std::current_exception();
      }
    }
  }
}

// Note [Spin then sleep]
// Waking a thread blocked on a condition variable takes tens of microseconds, as long as a
// small GEMM. Benchmarks and graph runs call the pool back to back, so a worker first spins
// (with a pause hint) for about a hundred microseconds watching `generation_`, and only then
// sleeps. The spin is bounded, so an idle pool costs no CPU.
constexpr int kSpinIterations = 20000;

void ThreadPool::worker_loop(int worker_index) {
  t_inside_pool = true;
  std::uint64_t seen = 0;
  while (true) {
    for (int spin = 0; spin < kSpinIterations &&
                       generation_.load(std::memory_order_acquire) == seen;
         ++spin) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
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
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --helpers_active_;
    }
    done_.notify_one();
  }
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
    helpers_active_ = want - 1;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  t_inside_pool = true;
  run_indices();
  t_inside_pool = false;
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return helpers_active_ == 0; });
    helpers_wanted_ = 0;
    fn_ = nullptr;
    error = error_;
  }
  if (error) {
    std::rethrow_exception(error);
  }
}

}  // namespace ka
