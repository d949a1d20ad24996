#include <ka/core/error.hpp>
#include <ka/core/spin.hpp>
#include <ka/executor/cpu_executor.hpp>
#include <ka/kernels/cpu_launch.hpp>
#include <ka/profiler/span.hpp>

#include <algorithm>
#include <limits>

namespace ka::executor {

// Note [Executor bookkeeping]
// Everything below is guarded by mutex_: a block is claimed under the lock, run without it,
// and counted under it again. Blocks are coarse (a GEMM tile, 16K+ elements), so the lock is
// taken a few times per microsecond at most; tiny eager tasks never come here (run_now).
// A task that throws stops handing out blocks; the tasks that depend on it finish with its
// error without running, so nothing runs on half-written inputs.
struct CpuExecutor::Node {
  KernelTask task;
  std::uint64_t seq = 0;  // submission order
  std::int64_t next_block = 0;
  std::int64_t done_blocks = 0;
  int active = 0;
  int pending = 0;  // unfinished tasks this one waits for
  std::vector<Node*> dependents;
  std::exception_ptr error;
  bool in_ready = false;
  std::size_t bytes = 0;  // the sum of the task's ranges: its work (Note [Light ready work])
  std::uint64_t seen_by = 0;  // seq of the last task whose hazard scan found this one
  // Where this task is listed in ranges_, to unlist it when it finishes.
  struct Listing {
    RangeIndex::iterator bucket;
    std::list<Node*>::iterator entry;
    bool writer;
  };
  std::vector<Listing> listings;
};

// Note [Waking helpers]
// A thread that makes blocks ready and then goes on running blocks (a worker, a thread in
// wait or wait_all, run_batch's caller) takes one of them itself; only the rest want another
// thread. Waking a sleeping one costs both a futex call and a context switch, several
// microseconds on a VM, more than a small task's kernel: a chain of one-block tasks woke the
// worker at every step, and it found nothing the finishing thread was not about to take. So
// the threads woken are the ready slots (over ready tasks, the blocks another thread could
// claim now: blocks left, at most the task's thread limit less the threads on it) less one
// where the thread that made them ready helps, at most as many as sleep. A sleeping worker
// is woken before a waiting caller; a caller in wait_all is woken for its own sake only when
// nothing is left in flight, one in wait(id) whenever a task finishes. Every ready block still
// finds a thread: the one that made it ready runs blocks until none is left, or woke one.

// Note [Spinning before sleeping]
// A thread that finds no block to run (a worker, a caller in wait or wait_all) first spins for
// spin_ (kDefaultSpin), watching progress_, and sleeps only if nothing changed meanwhile.
// Sleeping at once made every hand-off between tasks a futex wake, after which a guest VM
// runs the woken thread tens of microseconds later: in a chain of two-thread tasks (a BERT
// layer's GEMMs, attention, layer norms) one core sat idle at every step. The spin covers the
// gaps inside a graph and between back-to-back calls, and bounds what an idle executor costs
// (spin_ of one core per thread after its last task). A spinning thread is not counted as
// sleeping, so no one wakes it: it finds the work itself. Having spun in vain it reads
// progress_ again under mutex_ before it sleeps, since a change made between its last look
// and taking the lock woke no one.

// Note [Light ready work]
// Independent tiny tasks (a small model's two linears on 5 x 8 floats, its views and
// fallbacks) made ready together woke a helper per extra slot, and waking it cost more than
// their kernels: ka-bench --model on such graphs took 1.3-1.5x as long on 2 threads as on 1.
// A task that may use one thread and whose ranges add up to less than kLightTaskBytes runs in
// a few microseconds. When every ready task is such a one, together they stay under it, and
// there are at most kLightTasks of them (more are worth a helper, and the scan stays short),
// the thread that made them ready and goes on running blocks runs them all, and none is
// woken. Ready work of any other kind (a task that asked for several threads, whose blocks
// may meet at a barrier, or more bytes) is counted slot by slot as before.
constexpr std::size_t kLightTaskBytes = std::size_t{64} << 10;
constexpr int kLightTasks = 8;

// Note [Hazard index]
// A task depends on every unfinished earlier task one of whose ranges conflicts with one of
// its own (overlap, and one of the two writes). Comparing it with every task in flight made a
// graph of n independent tasks cost n^2/2 comparisons (100k adds: minutes). ranges_ instead
// keeps one bucket per distinct in-flight range (base, size, device), ordered by base, that
// lists its unfinished readers and writers. A new range [b, b + len) can only overlap buckets
// whose base lies in [b - max_range_bytes_, b + len): those are the ones visited. A read
// visits a bucket's writers only; a write its readers and writers; every task visited is a
// dependency, so the work is O(log n) per range plus the dependencies found plus the
// distinct ranges in the window, however many tasks read one tensor. Tasks are unlisted in
// O(1) when they finish.


namespace {
constexpr std::size_t kHistory = 4096;
}  // namespace

CpuExecutor::CpuExecutor(int threads, std::chrono::microseconds spin) : spin_(spin) {
  if (threads <= 0) threads = kernels::cpu_thread_limit();
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

CpuExecutor::~CpuExecutor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    note_progress_locked();
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

void CpuExecutor::index_ranges_locked(Node* n) {
  std::vector<Node*> found;
  const auto visit = [&](const std::list<Node*>& nodes) {
    for (Node* earlier : nodes) {
      ++hazard_comparisons_;
      if (earlier->seen_by == n->seq) continue;
      earlier->seen_by = n->seq;
      found.push_back(earlier);
    }
  };
  for (const MemRange& r : n->task.ranges) {
    if (r.bytes == 0) continue;
    const std::uintptr_t from = r.base - std::min<std::uintptr_t>(r.base, max_range_bytes_);
    constexpr int kAnyDevice = std::numeric_limits<int>::min();
    const auto end = ranges_.lower_bound(RangeKey{r.base + r.bytes, 0, kAnyDevice});
    for (auto it = ranges_.lower_bound(RangeKey{from, 0, kAnyDevice}); it != end; ++it) {
      ++hazard_comparisons_;
      if (!r.overlaps(it->second.range)) continue;
      visit(it->second.writers);
      if (r.writes()) visit(it->second.readers);
    }
  }
  for (const MemRange& r : n->task.ranges) {
    if (r.bytes == 0) continue;
    const int device = static_cast<int>(r.device.type) * 65536 + r.device.index;
    auto bucket = ranges_.try_emplace(RangeKey{r.base, r.bytes, device}).first;
    bucket->second.range = r;
    std::list<Node*>& list = r.writes() ? bucket->second.writers : bucket->second.readers;
    n->listings.push_back({bucket, list.insert(list.end(), n), r.writes()});
    max_range_bytes_ = std::max(max_range_bytes_, r.bytes);
  }
  std::sort(found.begin(), found.end(), [](const Node* a, const Node* b) { return a->seq < b->seq; });
  for (Node* earlier : found) {
    earlier->dependents.push_back(n);
    n->task.dependencies.push_back(earlier->task.id);
    ++n->pending;
  }
}

void CpuExecutor::unindex_ranges_locked(Node* n) {
  for (const Node::Listing& l : n->listings) {
    Bucket& b = l.bucket->second;
    (l.writer ? b.writers : b.readers).erase(l.entry);
    if (b.writers.empty() && b.readers.empty()) ranges_.erase(l.bucket);
  }
  n->listings.clear();
  if (ranges_.empty()) max_range_bytes_ = 0;
}

CpuExecutor::Node* CpuExecutor::enqueue_locked(KernelTask task) {
  auto node = std::make_unique<Node>();
  Node* n = node.get();
  if (task.id == 0) task.id = next_id_++;
  n->task = std::move(task);
  n->seq = next_seq_++;
  n->task.dependencies.clear();
  for (const MemRange& r : n->task.ranges) n->bytes += r.bytes;
  index_ranges_locked(n);
  if (history_order_.size() >= kHistory) {
    history_.erase(history_order_.front());
    history_order_.pop_front();
  }
  history_order_.push_back(n->task.id);
  history_[n->task.id] = n->task.dependencies;
  ++in_flight_ids_[n->task.id];
  in_flight_.emplace(n, std::move(node));
  return n;
}

void CpuExecutor::release_locked(Node* n) {
  if (n->pending != 0) return;
  if (n->task.cpu.blocks == 0) {
    finish(*n);
  } else {
    ready_.emplace(-n->task.priority, n->seq, n);
    n->in_ready = true;
    note_progress_locked();
  }
}

int CpuExecutor::ready_slots_locked(int at_most, bool light_counts_one) const {
  int slots = 0;
  std::size_t light_bytes = 0;
  bool all_light = light_counts_one;
  for (auto it = ready_.begin(); it != ready_.end() && (all_light || slots < at_most); ++it) {
    const Node* n = std::get<2>(*it);
    const std::int64_t left = n->task.cpu.blocks - n->next_block;
    const std::int64_t free_threads = n->task.cpu.threads - n->active;
    const int claimable = static_cast<int>(std::max<std::int64_t>(0, std::min(left, free_threads)));
    if (claimable == 0) continue;
    slots += claimable;
    light_bytes += n->bytes;
    all_light = all_light && n->task.cpu.threads == 1 && light_bytes < kLightTaskBytes &&
                slots <= kLightTasks;
  }
  // Note [Light ready work]
  if (all_light) return std::min(slots, 1);
  return std::min(slots, at_most);
}

void CpuExecutor::wake_helpers_locked(bool caller_helps) {
  const int sleeping = sleeping_workers_ + sleeping_waiters_;
  if (sleeping == 0) return;
  const int wanted = ready_slots_locked(sleeping + 1, caller_helps) - (caller_helps ? 1 : 0);
  for (int i = 0; i < std::min(wanted, sleeping_workers_); ++i) {
    work_cv_.notify_one();
    ++wakes_;
  }
  if (wanted > sleeping_workers_ && sleeping_waiters_ > 0) {
    done_cv_.notify_all();
    ++wakes_;
  }
}

std::uint64_t CpuExecutor::submit(KernelTask task) {
  check_cpu_task(task);
  std::lock_guard<std::mutex> lock(mutex_);
  Node* n = enqueue_locked(std::move(task));
  const std::uint64_t id = n->task.id;
  release_locked(n);
  wake_helpers_locked(false);
  return id;
}

std::vector<std::uint64_t> CpuExecutor::submit_batch(std::vector<KernelTask> tasks) {
  for (const KernelTask& t : tasks) check_cpu_task(t);
  std::lock_guard<std::mutex> lock(mutex_);
  return submit_batch_locked(std::move(tasks), false);
}

std::vector<std::uint64_t> CpuExecutor::run_batch(std::vector<KernelTask> tasks) {
  for (const KernelTask& t : tasks) check_cpu_task(t);
  std::unique_lock<std::mutex> lock(mutex_);
  std::vector<std::uint64_t> ids = submit_batch_locked(std::move(tasks), true);
  wait_all_locked(lock);
  return ids;
}

std::vector<std::uint64_t> CpuExecutor::submit_batch_locked(std::vector<KernelTask> tasks,
                                                            bool caller_helps) {
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
  wake_helpers_locked(caller_helps);
  return ids;
}

CpuExecutor::Node* CpuExecutor::pick_ready() {
  // ready_ is ordered by priority, then submission; the tasks skipped because they have as
  // many threads as they may use are at most the threads running.
  for (auto it = ready_.begin(); it != ready_.end();) {
    Node* n = std::get<2>(*it);
    if (n->next_block >= n->task.cpu.blocks) {
      n->in_ready = false;
      it = ready_.erase(it);  // every block handed out
      continue;
    }
    if (n->active < n->task.cpu.threads) return n;
    ++it;
  }
  return nullptr;
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
    wake_helpers_locked(true);  // this thread goes on running blocks
  }
  return true;
}

void CpuExecutor::finish(Node& first) {
  // A worklist, not recursion: a failed task fails a chain of any length after it.
  std::vector<Node*> to_finish{&first};
  while (!to_finish.empty()) {
    Node& node = *to_finish.back();
    to_finish.pop_back();
    if (node.error) {
      if (!first_error_) first_error_ = node.error;
      if (failed_.size() >= kHistory) failed_.pop_front();
      failed_.emplace_back(node.task.id, node.error);
    }
    std::vector<Node*> now_ready;
    for (Node* d : node.dependents) {
      if (node.error && !d->error) d->error = node.error;
      if (--d->pending == 0) now_ready.push_back(d);
    }
    // A node whose blocks were all handed out may still sit in ready_ (pick_ready prunes
    // lazily): drop it before it is freed.
    if (node.in_ready) ready_.erase({-node.task.priority, node.seq, &node});
    unindex_ranges_locked(&node);
    const auto id = in_flight_ids_.find(node.task.id);
    if (id != in_flight_ids_.end() && --id->second == 0) in_flight_ids_.erase(id);
    const auto it = in_flight_.find(&node);
    KA_ASSERT(it != in_flight_.end(), "finished task ", node.task.id, " is not in flight");
    in_flight_.erase(it);  // frees node
    // In reverse, so the worklist finishes them in submission order.
    for (auto d = now_ready.rbegin(); d != now_ready.rend(); ++d) {
      if ((*d)->error || (*d)->task.cpu.blocks == 0) {
        to_finish.push_back(*d);  // never runs on the output of a failed task
      } else {
        ready_.emplace(-(*d)->task.priority, (*d)->seq, *d);
        (*d)->in_ready = true;
      }
    }
  }
  note_progress_locked();
  // Waiters in wait_all want the end; one in wait(id) may be waiting for any task.
  if (sleeping_waiters_ > 0 && (in_flight_.empty() || id_waiters_ > 0)) done_cv_.notify_all();
}

void CpuExecutor::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (!run_one_block(lock) && !spin_for_progress(lock)) {
      ++sleeping_workers_;
      work_cv_.wait(lock);
      --sleeping_workers_;
    }
  }
}

bool CpuExecutor::spin_for_progress(std::unique_lock<std::mutex>& lock) {
  const std::uint64_t seen = progress_.load(std::memory_order_relaxed);
  lock.unlock();
  spin_until([&] { return progress_.load(std::memory_order_acquire) != seen; }, spin_);
  lock.lock();
  return progress_.load(std::memory_order_relaxed) != seen;
}

void CpuExecutor::sleep_waiting_locked(std::unique_lock<std::mutex>& lock) {
  ++sleeping_waiters_;
  done_cv_.wait(lock);
  --sleeping_waiters_;
}

void CpuExecutor::wait(std::uint64_t id) {
  std::unique_lock<std::mutex> lock(mutex_);
  ++id_waiters_;
  while (in_flight_ids_.count(id) != 0) {
    if (!run_one_block(lock) && !spin_for_progress(lock)) sleep_waiting_locked(lock);
  }
  --id_waiters_;
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
  wait_all_locked(lock);
}

void CpuExecutor::wait_all_locked(std::unique_lock<std::mutex>& lock) {
  while (!in_flight_.empty()) {
    if (!run_one_block(lock) && !spin_for_progress(lock)) sleep_waiting_locked(lock);
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
  const auto it = history_.find(id);
  return it == history_.end() ? std::vector<std::uint64_t>{} : it->second;
}

std::uint64_t CpuExecutor::hazard_comparisons() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hazard_comparisons_;
}

std::uint64_t CpuExecutor::wakes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return wakes_;
}

std::size_t CpuExecutor::in_flight() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_flight_.size();
}

}  // namespace ka::executor
