#include <ka/core/error.hpp>
#include <ka/profiler/cupti_profiler.hpp>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <utility>
#include <vector>

#if KA_HAVE_CUPTI
#include <ka/profiler/detail/cupti_check.hpp>
#include <ka/profiler/detail/cupti_records.hpp>
#endif

namespace ka::profiler {

const char* to_string(GpuActivityKind kind) noexcept {
  switch (kind) {
    case GpuActivityKind::kKernel:
      return "kernel";
    case GpuActivityKind::kMemcpy:
      return "memcpy";
    case GpuActivityKind::kMemset:
      return "memset";
  }
  return "unknown";
}

std::size_t CuptiProfiler::export_spans(SpanRecorder& recorder) {
  std::vector<GpuActivity> activities = take();
  for (GpuActivity& a : activities) {
    Span s;
    s.name = std::move(a.name);
    s.category = to_string(a.kind);
    s.task_id = a.task_id;
    s.start_ns = to_steady_ns(a.start_ns);
    s.end_ns = to_steady_ns(a.end_ns);
    s.track = a.stream;
    s.process = 1 + a.device;
    recorder.add(std::move(s));
  }
  return activities.size();
}

#if KA_HAVE_CUPTI

namespace detail {

std::string cupti_result_text(CUptiResult result) {
  const char* name = nullptr;
  if (cuptiGetResultString(result, &name) != CUPTI_SUCCESS || name == nullptr) {
    name = "CUPTI_ERROR_UNKNOWN";
  }
  std::string text = name;
#if CUPTI_API_VERSION >= 130000
  const char* message = nullptr;
  // Some results have no description beyond their name; do not say it twice.
  if (cuptiGetErrorMessage(result, &message) == CUPTI_SUCCESS && message != nullptr &&
      text != message) {
    text += ": ";
    text += message;
  }
#endif
  return text;
}

}  // namespace detail

struct CuptiProfiler::State {
  std::mutex mutex;  // Guards parser and dropped; taken by CUPTI's buffer-completed callback.
  detail::ActivityParser parser;
  std::uint64_t dropped = 0;
  std::int64_t offset_ns = 0;  // steady_clock ns - CUPTI ns, sampled at start().
  bool started = false;
};

namespace {

// Note [One CUPTI profiler at a time]
// CUPTI's buffer callbacks are process-wide and carry no user pointer, so the started
// profiler's state is published here. start() refuses a second profiler; stop() unpublishes
// only after CUPTI has flushed every buffer into it.
std::mutex g_active_mutex;  // Held while a callback uses the state, and to (un)publish it.
std::atomic<CuptiProfiler::State*> g_active{nullptr};

constexpr std::size_t kBufferBytes = std::size_t{4} << 20;
constexpr std::size_t kBufferAlign = 8;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_num_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_num_records = 0;  // As many as fit.
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer,
                               size_t /*size*/, size_t valid_size) {
  // Runs on a CUPTI thread or inside cuptiActivityFlushAll: never throw out of it.
  try {
    const std::lock_guard<std::mutex> lock(g_active_mutex);
    CuptiProfiler::State* state = g_active.load(std::memory_order_acquire);
    if (state != nullptr) {
      const std::lock_guard<std::mutex> state_lock(state->mutex);
      CUpti_Activity* record = nullptr;
      while (cuptiActivityGetNextRecord(buffer, valid_size, &record) == CUPTI_SUCCESS) {
        state->parser.consume(*record);
      }
      size_t dropped = 0;
      if (cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped) == CUPTI_SUCCESS) {
        state->dropped += dropped;
      }
    }
  } catch (...) {
    // Out of memory while parsing: the records are lost, the process is not.
  }
  std::free(buffer);
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
                                         CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                         CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET};

// Per thread: whether each push_task() really pushed, so pop_task() pops only those.
thread_local std::vector<bool> t_pushed;

}  // namespace

CuptiProfiler::CuptiProfiler() : state_(std::make_unique<State>()) {}

CuptiProfiler::~CuptiProfiler() {
  try {
    stop();
  } catch (...) {
    // A destructor cannot report CUPTI failing to flush; the records are lost.
  }
}

bool CuptiProfiler::compiled() noexcept { return true; }

Status CuptiProfiler::start() {
  if (state_->started) return Status::ok();
  {
    const std::lock_guard<std::mutex> lock(g_active_mutex);
    if (g_active.load(std::memory_order_acquire) != nullptr) {
      return Status::unsupported("another CuptiProfiler is already started");
    }
    g_active.store(state_.get(), std::memory_order_release);
  }
  try {
    {
      const std::lock_guard<std::mutex> lock(state_->mutex);
      state_->parser.clear();
      state_->dropped = 0;
    }
    KA_CUPTI_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    for (const CUpti_ActivityKind kind : kKinds) KA_CUPTI_CHECK(cuptiActivityEnable(kind));
    // The two clocks are read back to back; the offset is good to about a microsecond.
    std::uint64_t cupti_now = 0;
    const std::int64_t before = now_ns();
    KA_CUPTI_CHECK(cuptiGetTimestamp(&cupti_now));
    const std::int64_t after = now_ns();
    state_->offset_ns = before + (after - before) / 2 - static_cast<std::int64_t>(cupti_now);
  } catch (const CuptiError& e) {
    for (const CUpti_ActivityKind kind : kKinds) cuptiActivityDisable(kind);
    const std::lock_guard<std::mutex> lock(g_active_mutex);
    g_active.store(nullptr, std::memory_order_release);
    return Status::unsupported(e.what());
  }
  state_->started = true;
  return Status::ok();
}

void CuptiProfiler::stop() {
  if (!state_->started) return;
  state_->started = false;
  for (const CUpti_ActivityKind kind : kKinds) cuptiActivityDisable(kind);
  // Flush without holding g_active_mutex: the completion callback may run on this thread.
  const CUptiResult flushed = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  {
    const std::lock_guard<std::mutex> lock(g_active_mutex);
    g_active.store(nullptr, std::memory_order_release);
  }
  KA_CUPTI_CHECK(flushed);
}

bool CuptiProfiler::started() const noexcept { return state_->started; }

std::vector<GpuActivity> CuptiProfiler::take() {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->parser.take();
}

std::uint64_t CuptiProfiler::dropped_records() const noexcept {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->dropped;
}

std::int64_t CuptiProfiler::to_steady_ns(std::uint64_t cupti_ns) const noexcept {
  return static_cast<std::int64_t>(cupti_ns) + state_->offset_ns;
}

void CuptiProfiler::push_task(std::uint64_t task_id) noexcept {
  const bool push = g_active.load(std::memory_order_relaxed) != nullptr &&
                    cuptiActivityPushExternalCorrelationId(detail::kTaskCorrelationKind, task_id) ==
                        CUPTI_SUCCESS;
  try {
    t_pushed.push_back(push);
  } catch (...) {
    if (push) {
      std::uint64_t last = 0;
      cuptiActivityPopExternalCorrelationId(detail::kTaskCorrelationKind, &last);
    }
  }
}

void CuptiProfiler::pop_task() noexcept {
  if (t_pushed.empty()) return;
  const bool pushed = t_pushed.back();
  t_pushed.pop_back();
  if (pushed) {
    std::uint64_t last = 0;
    cuptiActivityPopExternalCorrelationId(detail::kTaskCorrelationKind, &last);
  }
}

#else  // !KA_HAVE_CUPTI

struct CuptiProfiler::State {};

CuptiProfiler::CuptiProfiler() = default;
CuptiProfiler::~CuptiProfiler() = default;
bool CuptiProfiler::compiled() noexcept { return false; }
Status CuptiProfiler::start() {
  return Status::unsupported("CUPTI not compiled (ka was built without the CUPTI headers)");
}
void CuptiProfiler::stop() {}
bool CuptiProfiler::started() const noexcept { return false; }
std::vector<GpuActivity> CuptiProfiler::take() { return {}; }
std::uint64_t CuptiProfiler::dropped_records() const noexcept { return 0; }
std::int64_t CuptiProfiler::to_steady_ns(std::uint64_t cupti_ns) const noexcept {
  return static_cast<std::int64_t>(cupti_ns);
}
void CuptiProfiler::push_task(std::uint64_t /*task_id*/) noexcept {}
void CuptiProfiler::pop_task() noexcept {}

#endif  // KA_HAVE_CUPTI

}  // namespace ka::profiler
