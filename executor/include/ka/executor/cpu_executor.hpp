// CpuExecutor: runs KernelTasks' grid blocks on a pool of threads, in dependency order.
#pragma once

#include <ka/executor/kernel_task.hpp>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace ka::executor {

/// The CPU executor (DESIGN.md §5). Every task's grid blocks become work items; a task is
/// ready when the tasks it depends on (by MemRange hazards against every task submitted
/// before it and not yet finished) have finished. Blocks of all ready tasks are handed to
/// the workers highest priority first, then in submission order, so independent tasks of a
/// graph overlap and dependent ones wait. At most `task.cpu.threads` threads work on one task.
/// The thread that waits takes part in the work.
///
///   CpuExecutor ex(2);
///   auto a = ex.submit(std::move(t1));   // writes X
///   auto b = ex.submit(std::move(t2));   // reads X: runs after a
///   ex.wait_all();                       // rethrows the first error of any task
class CpuExecutor {
 public:
  /// `threads` threads in all (the waiting caller plus threads-1 workers); <= 0 means the CPU
  /// kernels' thread limit when the executor is made (kernels::cpu_thread_limit(): every
  /// logical core unless KA_NUM_THREADS or set_cpu_thread_limit says fewer), so that
  /// `ka-bench --threads N` caps graph runs as it caps each kernel.
  explicit CpuExecutor(int threads = 0);
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

  /// Ids of the tasks `id` had to wait for when it was submitted (for tests and dumps).
  [[nodiscard]] std::vector<std::uint64_t> dependencies_of(std::uint64_t id) const;
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
  // Adds a task to in_flight_ with its dependencies; returns it. mutex_ held.
  Node* enqueue_locked(KernelTask task);
  void release_locked(Node* n);

  std::vector<std::thread> workers_;
  mutable std::mutex mutex_;
  std::condition_variable work_cv_;  // new ready blocks, or stop
  std::condition_variable done_cv_;  // a task finished
  std::vector<std::unique_ptr<Node>> in_flight_;  // submission order
  std::deque<Node*> ready_;
  std::vector<std::pair<std::uint64_t, std::vector<std::uint64_t>>> history_;  // bounded
  std::uint64_t next_id_ = 1;
  std::vector<std::pair<std::uint64_t, std::exception_ptr>> failed_;  // bounded
  std::exception_ptr first_error_;
  bool stop_ = false;
};

}  // namespace ka::executor
