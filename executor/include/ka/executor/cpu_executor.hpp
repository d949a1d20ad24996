// CpuExecutor: runs KernelTasks' grid blocks on a pool of threads, in dependency order.
#pragma once

#include <ka/executor/kernel_task.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace ka::executor {

/// The CPU executor (DESIGN.md §5). Every task's grid blocks become work items; a task is
/// ready when the tasks it depends on (by MemRange hazards against every task submitted
/// before it and not yet finished) have finished. Blocks of all ready tasks are handed to
/// the workers highest priority first, then in submission order, so independent tasks of a
/// graph overlap and dependent ones wait. At most `task.cpu.threads` threads work on one task.
/// The thread that waits takes part in the work. Submitting, releasing and finishing a task
/// cost O(log n) in the tasks in flight plus its dependencies (see Note [Hazard index]), so a
/// graph of n tasks runs in time linear in n, not quadratic.
///
///   CpuExecutor ex(2);
///   auto a = ex.submit(std::move(t1));   // writes X
///   auto b = ex.submit(std::move(t2));   // reads X: runs after a
///   ex.wait_all();                       // rethrows the first error of any task
class CpuExecutor {
 public:
  static constexpr std::chrono::microseconds kDefaultSpin{100};

  /// `threads` threads in all (the waiting caller plus threads-1 workers); <= 0 means the CPU
  /// kernels' thread limit when the executor is made (kernels::cpu_thread_limit(): every
  /// logical core unless KA_NUM_THREADS or set_cpu_thread_limit says fewer), so that
  /// `ka-bench --threads N` caps graph runs as it caps each kernel.
  ///
  /// `spin`: how long a thread with nothing to run spins before it sleeps (Note [Spinning
  /// before sleeping]); kDefaultSpin unless a test wants another.
  explicit CpuExecutor(int threads = 0, std::chrono::microseconds spin = kDefaultSpin);
  ~CpuExecutor();
  CpuExecutor(const CpuExecutor&) = delete;
  CpuExecutor& operator=(const CpuExecutor&) = delete;

  /// The process-wide executor, sized to the hardware.
  static CpuExecutor& global();

  [[nodiscard]] int threads() const noexcept { return static_cast<int>(workers_.size()) + 1; }

  /// Queues a CPU task; returns its id. Throws ka::ValueError for a task that is not a CPU
  /// task or has no prepared launch.
  std::uint64_t submit(KernelTask task);
  /// Queues several tasks at once (a graph): dependencies among them are computed before any
  /// of them starts, so they do not depend on timing. Returns their ids in order.
  std::vector<std::uint64_t> submit_batch(std::vector<KernelTask> tasks);
  /// submit_batch() then wait_all(), the calling thread running blocks from the start, so the
  /// blocks it will take wake no other thread (Note [Waking helpers] in cpu_executor.cpp):
  /// for a caller with nothing else to do while the tasks run. Returns their ids in order;
  /// rethrows the first error as wait_all() does.
  std::vector<std::uint64_t> run_batch(std::vector<KernelTask> tasks);
  /// Blocks (helping) until task `id` finished; rethrows its error (a task whose input came
  /// from a failed task fails with that task's error without running). Unknown or already
  /// finished ids return at once.
  void wait(std::uint64_t id);
  /// Blocks (helping) until every submitted task finished; rethrows the first error.
  void wait_all();

  /// Runs one task now on the calling thread and, when it has several blocks and wants more
  /// than one thread, on ThreadPool::global(); no queue and no hazard tracking: for eager
  /// calls, whose inputs no in-flight task may write. Rethrows the kernel's error.
  void run_now(const KernelTask& task);

  /// Ids of the tasks `id` had to wait for when it was submitted (for tests and dumps), in
  /// submission order; known for the last 4096 tasks submitted.
  [[nodiscard]] std::vector<std::uint64_t> dependencies_of(std::uint64_t id) const;
  /// Range comparisons made by hazard tracking since the executor was made: grows with the
  /// tasks submitted and their dependencies, never with the square of the tasks in flight
  /// (for tests that guard against a quadratic regression without timing).
  [[nodiscard]] std::uint64_t hazard_comparisons() const;
  /// Times a sleeping thread was woken to run ready blocks since the executor was made (for
  /// tests that check a chain of one-block tasks wakes none).
  [[nodiscard]] std::uint64_t wakes() const;
  /// Tasks submitted and not yet finished.
  [[nodiscard]] std::size_t in_flight() const;

 private:
  struct Node;
  void worker_loop();
  // Runs one block of some ready task; returns false when none is available. `lock` is held
  // on entry and exit.
  bool run_one_block(std::unique_lock<std::mutex>& lock);
  void finish(Node& node);
  Node* pick_ready();
  std::vector<std::uint64_t> submit_batch_locked(std::vector<KernelTask> tasks, bool caller_helps);
  void wait_all_locked(std::unique_lock<std::mutex>& lock);
  // Blocks in wait or wait_all until a task finishes or help is wanted. mutex_ held.
  void sleep_waiting_locked(std::unique_lock<std::mutex>& lock);
  // Spins with mutex_ released until progress_ moves or the spin's budget has passed; returns
  // whether it moved. See Note [Spinning before sleeping]. mutex_ held on entry and exit.
  bool spin_for_progress(std::unique_lock<std::mutex>& lock);
  // Counts one change a spinning thread may act on. mutex_ held.
  void note_progress_locked() { progress_.fetch_add(1, std::memory_order_release); }
  // Blocks another thread could claim now, counted up to at_most; with light_counts_one, one
  // where all of them are light (Note [Light ready work]). mutex_ held.
  int ready_slots_locked(int at_most, bool light_counts_one) const;
  // Wakes sleeping threads for the ready blocks; `caller_helps`: the calling thread goes on
  // to run one. See Note [Waking helpers]. mutex_ held.
  void wake_helpers_locked(bool caller_helps);
  // Adds a task to in_flight_ with its dependencies; returns it. mutex_ held.
  Node* enqueue_locked(KernelTask task);
  void release_locked(Node* n);

  // In-flight ranges with the same base, size and device share one bucket, which lists the
  // unfinished tasks that read and that write them. See Note [Hazard index].
  struct RangeKey {
    std::uintptr_t base;
    std::size_t bytes;
    int device;
    bool operator<(const RangeKey& o) const {
      return std::tie(base, bytes, device) < std::tie(o.base, o.bytes, o.device);
    }
  };
  struct Bucket {
    MemRange range;
    std::list<Node*> readers;
    std::list<Node*> writers;
  };
  using RangeIndex = std::map<RangeKey, Bucket>;
  // Records `n`'s dependencies on the tasks in the index, then adds its ranges. mutex_ held.
  void index_ranges_locked(Node* n);
  void unindex_ranges_locked(Node* n);

  std::vector<std::thread> workers_;
  mutable std::mutex mutex_;
  std::condition_variable work_cv_;  // ready blocks want a worker, or stop
  std::condition_variable done_cv_;  // the tasks waited for finished, or help is wanted
  std::unordered_map<const Node*, std::unique_ptr<Node>> in_flight_;
  std::unordered_map<std::uint64_t, int> in_flight_ids_;  // id -> tasks in flight with it
  RangeIndex ranges_;
  std::size_t max_range_bytes_ = 0;  // of the ranges in ranges_ (reset when it empties)
  std::uint64_t hazard_comparisons_ = 0;
  std::uint64_t wakes_ = 0;
  std::uint64_t next_seq_ = 1;  // submission order
  // Ready tasks by (-priority, submission order).
  std::set<std::tuple<int, std::uint64_t, Node*>> ready_;
  std::deque<std::uint64_t> history_order_;  // bounded
  std::unordered_map<std::uint64_t, std::vector<std::uint64_t>> history_;
  std::uint64_t next_id_ = 1;
  std::deque<std::pair<std::uint64_t, std::exception_ptr>> failed_;  // bounded
  std::exception_ptr first_error_;
  int sleeping_workers_ = 0;  // in work_cv_.wait
  int sleeping_waiters_ = 0;  // in done_cv_.wait (wait, wait_all)
  int id_waiters_ = 0;        // threads in wait(id)
  bool stop_ = false;
  // Bumped under mutex_ whenever a task becomes ready or finishes, or the executor stops;
  // read without it by spinning threads (Note [Spinning before sleeping]).
  std::atomic<std::uint64_t> progress_{0};
  std::chrono::microseconds spin_;
};

}  // namespace ka::executor
