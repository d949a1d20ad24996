#include <ka/core/error.hpp>
#include <ka/executor/cpu_executor.hpp>
#include <ka/kernels/cpu_launch.hpp>
#include <ka/profiler/span.hpp>

#include <algorithm>

namespace ka::executor {

// Note [Executor bookkeeping]
// Everything below is guarded by mutex_: a block is claimed under the lock, run without it,
// and counted under it again. Blocks are coarse (a GEMM tile, 16K+ elements), so the lock is
// taken a few times per microsecond at most; tiny eager tasks never come here (run_now).
// A task that throws stops handing out blocks; the tasks that depend on it finish with its
// error without running, so nothing runs on half-written inputs.
struct CpuExecutor::Node {
  KernelTask task;
  std::int64_t next_block = 0;
  std::int64_t done_blocks = 0;
  int active = 0;
  int pending = 0;  // unfinished tasks this one waits for
  std::vector<Node*> dependents;
  std::exception_ptr error;
};

namespace {
constexpr std::size_t kHistory = 4096;
}  // namespace

CpuExecutor::CpuExecutor(int threads) {
  if (threads <= 0) threads = kernels::cpu_thread_limit();
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

CpuExecutor::~CpuExecutor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

CpuExecutor& CpuExecutor::global() {
  // Never destroyed: static destructors elsewhere may still run graphs.
  static CpuExecutor* executor = new CpuExecutor(0);
  return *executor;
}

namespace {
void check_cpu_task(const KernelTask& task) {
  KA_CHECK(task.device.type == DeviceType::kCPU, "CpuExecutor: task ", task.label, " is for ",
           task.device.str(), ", not cpu");
  KA_CHECK(task.cpu.block_fn != nullptr || task.cpu.blocks == 0, "CpuExecutor: task ",
           task.label, " has no prepared CPU launch");
}
}  // namespace

CpuExecutor::Node* CpuExecutor::enqueue_locked(KernelTask task) {
  auto node = std::make_unique<Node>();
  Node* n = node.get();
  if (task.id == 0) task.id = next_id_++;
  n->task = std::move(task);
  n->task.dependencies.clear();
  for (const auto& earlier : in_flight_) {
    if (depends_on(n->task, earlier->task)) {
      earlier->dependents.push_back(n);
      n->task.dependencies.push_back(earlier->task.id);
      ++n->pending;
    }
  }
  if (history_.size() >= kHistory) history_.erase(history_.begin());
  history_.emplace_back(n->task.id, n->task.dependencies);
  in_flight_.push_back(std::move(node));
  return n;
}

void CpuExecutor::release_locked(Node* n) {
  if (n->pending != 0) return;
  if (n->task.cpu.blocks == 0) {
    finish(*n);
  } else {
    ready_.push_back(n);
    work_cv_.notify_all();
  }
}

std::uint64_t CpuExecutor::submit(KernelTask task) {
  check_cpu_task(task);
  std::lock_guard<std::mutex> lock(mutex_);
  Node* n = enqueue_locked(std::move(task));
  const std::uint64_t id = n->task.id;
  release_locked(n);
  return id;
}

std::vector<std::uint64_t> CpuExecutor::submit_batch(std::vector<KernelTask> tasks) {
  for (const KernelTask& t : tasks) check_cpu_task(t);
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Node*> nodes;
  std::vector<std::uint64_t> ids;
  for (KernelTask& t : tasks) {
    nodes.push_back(enqueue_locked(std::move(t)));
    ids.push_back(nodes.back()->task.id);
  }
  // Nothing starts before every edge exists. Only the roots are released here: releasing one
  // may finish (and free) tasks that depended on it, which are never roots.
  std::vector<Node*> roots;
  for (Node* n : nodes) {
    if (n->pending == 0) roots.push_back(n);
  }
  for (Node* n : roots) release_locked(n);
  return ids;
}

CpuExecutor::Node* CpuExecutor::pick_ready() {
  Node* best = nullptr;
  for (auto it = ready_.begin(); it != ready_.end();) {
    Node* n = *it;
    if (n->next_block >= n->task.cpu.blocks) {
      it = ready_.erase(it);  // every block handed out
      continue;
    }
    if (n->active < n->task.cpu.threads &&
        (best == nullptr || n->task.priority > best->task.priority)) {
      best = n;  // ties keep submission order
    }
    ++it;
  }
  return best;
}

bool CpuExecutor::run_one_block(std::unique_lock<std::mutex>& lock) {
  Node* n = pick_ready();
  if (n == nullptr) return false;
  const std::int64_t block = n->next_block++;
  ++n->active;
  lock.unlock();
  std::exception_ptr error;
  try {
    KA_SPAN("block", n->task.id);
    n->task.cpu.run_block(block);
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  --n->active;
  ++n->done_blocks;
  if (error && !n->error) {
    n->error = error;
    // Hand out no more blocks; count them as done so the task can finish.
    n->done_blocks += n->task.cpu.blocks - n->next_block;
    n->next_block = n->task.cpu.blocks;
  }
  if (n->done_blocks == n->task.cpu.blocks && n->active == 0) {
    // A split launch's second phase, once, by the thread that ran its last block; no block of
    // n is left to hand out, so n is this thread's alone until finish().
    if (!n->error && n->task.cpu.finish_fn != nullptr) {
      lock.unlock();
      try {
        n->task.cpu.finish();
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      if (error) n->error = error;
    }
    finish(*n);
  }
  return true;
}

void CpuExecutor::finish(Node& node) {
  if (node.error) {
    if (!first_error_) first_error_ = node.error;
    if (failed_.size() >= kHistory) failed_.erase(failed_.begin());
    failed_.emplace_back(node.task.id, node.error);
  }
  std::vector<Node*> now_ready;
  for (Node* d : node.dependents) {
    if (node.error && !d->error) d->error = node.error;
    if (--d->pending == 0) now_ready.push_back(d);
  }
  // A node whose blocks were all handed out may still sit in ready_ (pick_ready prunes
  // lazily): drop it before it is freed.
  ready_.erase(std::remove(ready_.begin(), ready_.end(), &node), ready_.end());
  const auto it = std::find_if(in_flight_.begin(), in_flight_.end(),
                               [&](const auto& p) { return p.get() == &node; });
  KA_ASSERT(it != in_flight_.end(), "finished task ", node.task.id, " is not in flight");
  std::unique_ptr<Node> owned = std::move(*it);
  in_flight_.erase(it);
  for (Node* d : now_ready) {
    if (d->error || d->task.cpu.blocks == 0) {
      finish(*d);  // never runs on the output of a failed task
    } else {
      ready_.push_back(d);
    }
  }
  work_cv_.notify_all();
  done_cv_.notify_all();
}

void CpuExecutor::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (!run_one_block(lock)) work_cv_.wait(lock);
  }
}

void CpuExecutor::wait(std::uint64_t id) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    const auto it = std::find_if(in_flight_.begin(), in_flight_.end(),
                                 [&](const auto& p) { return p->task.id == id; });
    if (it == in_flight_.end()) break;
    if (!run_one_block(lock)) done_cv_.wait(lock);
  }
  const auto failed = std::find_if(failed_.begin(), failed_.end(),
                                   [&](const auto& f) { return f.first == id; });
  if (failed != failed_.end()) {
    std::exception_ptr e = failed->second;
    if (first_error_ == e) first_error_ = nullptr;
    failed_.erase(failed);
    std::rethrow_exception(e);
  }
}

void CpuExecutor::wait_all() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!in_flight_.empty()) {
    if (!run_one_block(lock)) done_cv_.wait(lock);
  }
  if (first_error_) {
    std::exception_ptr e = first_error_;
    first_error_ = nullptr;
    failed_.clear();
    std::rethrow_exception(e);
  }
}

void CpuExecutor::run_now(const KernelTask& task) {
  check_cpu_task(task);
  kernels::run_on_pool(task.cpu);  // inline for one block or one thread
}

std::vector<std::uint64_t> CpuExecutor::dependencies_of(std::uint64_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [task_id, deps] : history_) {
    if (task_id == id) return deps;
  }
  return {};
}

std::size_t CpuExecutor::in_flight() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_flight_.size();
}

}  // namespace ka::executor
