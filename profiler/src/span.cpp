#include <ka/core/error.hpp>
#include <ka/profiler/span.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <utility>

namespace ka::profiler {
namespace detail {

struct ThreadSpans {
  std::mutex mutex;  // Taken by the owning thread per span and by collect(): uncontended.
  std::vector<RawSpan> spans;
  std::size_t max_spans = 0;  // Guarded by mutex.
  std::uint64_t dropped = 0;  // Guarded by mutex.
  std::uint32_t track = 0;
  std::uint32_t depth = 0;  // Touched only by the owning thread.
};

}  // namespace detail

namespace {

std::atomic<std::uint64_t> next_recorder_id{1};
std::atomic<std::uint32_t> next_track{1};

std::uint32_t this_thread_track() {
  thread_local const std::uint32_t track = next_track.fetch_add(1, std::memory_order_relaxed);
  return track;
}

struct CachedBuffer {
  std::uint64_t recorder_id = 0;
  std::shared_ptr<detail::ThreadSpans> buffer;
};

}  // namespace

std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

SpanRecorder::SpanRecorder() : id_(next_recorder_id.fetch_add(1, std::memory_order_relaxed)) {}

SpanRecorder::~SpanRecorder() = default;

SpanRecorder& SpanRecorder::global() {
  // Leaked on purpose: threads may still end spans during static destruction.
  static SpanRecorder* recorder = [] {
    auto* r = new SpanRecorder();
    const char* env = std::getenv("KA_TRACE");
    if (env != nullptr && env[0] != '\0' && std::string(env) != "0") r->set_enabled(true);
    return r;
  }();
  return *recorder;
}

detail::ThreadSpans& SpanRecorder::thread_buffer() {
  // A thread usually records into one recorder; keep a few, most recent first. The cache holds
  // shared ownership, so a buffer outlives whichever of thread and recorder ends first.
  thread_local std::vector<CachedBuffer> cache;
  for (std::size_t i = 0; i < cache.size(); ++i) {
    if (cache[i].recorder_id == id_) {
      if (i != 0) std::swap(cache[0], cache[i]);
      return *cache[0].buffer;
    }
  }
  auto buffer = std::make_shared<detail::ThreadSpans>();
  buffer->track = this_thread_track();
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    buffer->max_spans = max_spans_per_thread_;
    threads_.push_back(buffer);
  }
  // Recorders are few; forget the oldest beyond 8 so a thread that outlives many test
  // recorders does not keep their buffers alive forever.
  if (cache.size() >= 8) cache.pop_back();
  cache.insert(cache.begin(), CachedBuffer{id_, buffer});
  return *buffer;
}

void SpanRecorder::add(Span span) {
  const std::lock_guard<std::mutex> lock(mutex_);
  external_.push_back(std::move(span));
}

std::vector<Span> SpanRecorder::collect() const {
  std::vector<Span> out;
  const std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& thread : threads_) {
    const std::lock_guard<std::mutex> thread_lock(thread->mutex);
    for (const detail::RawSpan& raw : thread->spans) {
      Span s;
      s.name = raw.name;
      s.category = "cpu";
      s.task_id = raw.task_id;
      s.start_ns = raw.start_ns;
      s.end_ns = raw.end_ns;
      s.track = thread->track;
      s.depth = raw.depth;
      out.push_back(std::move(s));
    }
  }
  out.insert(out.end(), external_.begin(), external_.end());
  // Outer spans first when two start together, so a reader can rebuild the nesting.
  std::stable_sort(out.begin(), out.end(), [](const Span& a, const Span& b) {
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.depth < b.depth;
  });
  return out;
}

void SpanRecorder::clear() {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& thread : threads_) {
    const std::lock_guard<std::mutex> thread_lock(thread->mutex);
    thread->spans.clear();
    thread->dropped = 0;
  }
  external_.clear();
}

void SpanRecorder::set_max_spans_per_thread(std::size_t max_spans) {
  const std::lock_guard<std::mutex> lock(mutex_);
  max_spans_per_thread_ = max_spans;
  for (const auto& thread : threads_) {
    const std::lock_guard<std::mutex> thread_lock(thread->mutex);
    thread->max_spans = max_spans;
  }
}

std::uint64_t SpanRecorder::dropped() const {
  std::uint64_t total = 0;
  const std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& thread : threads_) {
    const std::lock_guard<std::mutex> thread_lock(thread->mutex);
    total += thread->dropped;
  }
  return total;
}

std::vector<SpanStats> SpanRecorder::aggregate() const {
  std::map<std::string, SpanStats> by_name;
  for (const Span& s : collect()) {
    SpanStats& st = by_name[s.name];
    const std::int64_t d = s.duration_ns();
    if (st.count == 0) {
      st.name = s.name;
      st.min_ns = d;
      st.max_ns = d;
    }
    ++st.count;
    st.total_ns += d;
    st.min_ns = std::min(st.min_ns, d);
    st.max_ns = std::max(st.max_ns, d);
  }
  std::vector<SpanStats> out;
  out.reserve(by_name.size());
  for (auto& entry : by_name) out.push_back(std::move(entry.second));
  std::stable_sort(out.begin(), out.end(),
                   [](const SpanStats& a, const SpanStats& b) { return a.total_ns > b.total_ns; });
  return out;
}

std::string SpanRecorder::chrome_trace_json() const {
  const std::vector<Span> spans = collect();
  const std::int64_t origin = spans.empty() ? 0 : spans.front().start_ns;
  nlohmann::json events = nlohmann::json::array();
  std::set<std::uint32_t> processes;
  std::set<std::pair<std::uint32_t, std::uint32_t>> gpu_tracks;
  for (const Span& s : spans) {
    nlohmann::json e;
    e["name"] = s.name;
    e["cat"] = s.category;
    e["ph"] = "X";
    e["ts"] = static_cast<double>(s.start_ns - origin) / 1e3;
    e["dur"] = static_cast<double>(s.duration_ns()) / 1e3;
    e["pid"] = s.process;
    e["tid"] = s.track;
    nlohmann::json args = nlohmann::json::object();
    if (s.task_id != kNoTask) args["task_id"] = s.task_id;
    args["depth"] = s.depth;
    e["args"] = std::move(args);
    events.push_back(std::move(e));
    processes.insert(s.process);
    if (s.process != 0) gpu_tracks.emplace(s.process, s.track);
  }
  // Metadata events name the rows: "host" and "gpu N", with "stream S" under a GPU.
  for (const std::uint32_t p : processes) {
    events.push_back(
        {{"name", "process_name"},
         {"ph", "M"},
         {"pid", p},
         {"args", {{"name", p == 0 ? std::string("host") : "gpu " + std::to_string(p - 1)}}}});
  }
  for (const auto& [p, t] : gpu_tracks) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", p},
                      {"tid", t},
                      {"args", {{"name", "stream " + std::to_string(t)}}}});
  }
  nlohmann::json doc;
  doc["traceEvents"] = std::move(events);
  doc["displayTimeUnit"] = "ns";
  return doc.dump();
}

void SpanRecorder::write_chrome_trace(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  KA_CHECK_TYPE(IoError, out.good(), "cannot open '", path, "' for writing");
  out << chrome_trace_json() << '\n';
  out.flush();
  KA_CHECK_TYPE(IoError, out.good(), "cannot write '", path, "'");
}

ScopedSpan::ScopedSpan(const char* name, std::uint64_t task_id, SpanRecorder& recorder) noexcept
    : name_(name), task_id_(task_id) {
  if (!recorder.enabled()) return;
  try {
    buffer_ = &recorder.thread_buffer();
  } catch (...) {
    // Out of memory for a trace buffer: lose this span, not the program.
    return;
  }
  ++buffer_->depth;
  start_ns_ = now_ns();
}

ScopedSpan::~ScopedSpan() {
  if (buffer_ == nullptr) return;
  const std::int64_t end = now_ns();
  const std::uint32_t depth = --buffer_->depth;
  try {
    const std::lock_guard<std::mutex> lock(buffer_->mutex);
    if (buffer_->spans.size() >= buffer_->max_spans) {
      ++buffer_->dropped;
      return;
    }
    buffer_->spans.push_back(detail::RawSpan{name_, task_id_, start_ns_, end, depth});
  } catch (...) {
    // As above: a lost span is better than std::terminate from a destructor.
  }
}

}  // namespace ka::profiler
