#include <ka/profiler/perf_counters.hpp>

#include <cerrno>
#include <cstring>
#include <utility>

#if defined(__linux__)
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace ka::profiler {
namespace {

#if defined(__linux__)
// Opens one counter for the calling thread on any CPU, disabled. Returns -1 and sets `reason`
// on failure.
int open_counter(PerfEvent event, std::string& reason) {
  perf_event_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  switch (event) {
    case PerfEvent::kTaskClock:
      attr.type = PERF_TYPE_SOFTWARE;
      attr.config = PERF_COUNT_SW_TASK_CLOCK;
      break;
    case PerfEvent::kCycles:
      attr.type = PERF_TYPE_HARDWARE;
      attr.config = PERF_COUNT_HW_CPU_CYCLES;
      break;
    case PerfEvent::kInstructions:
      attr.type = PERF_TYPE_HARDWARE;
      attr.config = PERF_COUNT_HW_INSTRUCTIONS;
      break;
  }
  attr.disabled = 1;
  // User space only: perf_event_paranoid=2 (the common default) refuses kernel counting.
  attr.exclude_kernel = 1;
  attr.exclude_hv = 1;
  attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
  const long fd = syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0UL);
  if (fd < 0) {
    const int err = errno;
    reason = std::string("perf_event_open: ") + std::strerror(err);
    if (err == EACCES || err == EPERM) {
      reason += " (see /proc/sys/kernel/perf_event_paranoid)";
    } else if (err == ENOENT || err == EOPNOTSUPP) {
      reason += " (no such counter on this CPU or VM)";
    }
    return -1;
  }
  return static_cast<int>(fd);
}
#endif

}  // namespace

const char* to_string(PerfEvent event) noexcept {
  switch (event) {
    case PerfEvent::kTaskClock:
      return "task-clock";
    case PerfEvent::kCycles:
      return "cycles";
    case PerfEvent::kInstructions:
      return "instructions";
  }
  return "unknown";
}

std::string CounterValue::str() const {
  std::string out = to_string(event);
  out += '=';
  if (available) {
    out += std::to_string(value);
    if (event == PerfEvent::kTaskClock) out += " ns";
  } else {
    out += "unavailable (" + unavailable_reason + ")";
  }
  return out;
}

PerfCounters::PerfCounters(std::vector<PerfEvent> events) {
  counters_.reserve(events.size());
  for (const PerfEvent e : events) {
    Counter c{e, -1, {}};
#if defined(__linux__)
    c.fd = open_counter(e, c.reason);
#else
    c.reason = "perf_event_open exists only on Linux";
#endif
    counters_.push_back(std::move(c));
  }
}

PerfCounters::~PerfCounters() { close_all(); }

PerfCounters::PerfCounters(PerfCounters&& other) noexcept
    : counters_(std::exchange(other.counters_, {})) {}

PerfCounters& PerfCounters::operator=(PerfCounters&& other) noexcept {
  if (this != &other) {
    close_all();
    counters_ = std::exchange(other.counters_, {});
  }
  return *this;
}

void PerfCounters::close_all() noexcept {
#if defined(__linux__)
  for (Counter& c : counters_) {
    if (c.fd >= 0) ::close(c.fd);
    c.fd = -1;
  }
#endif
}

void PerfCounters::start() {
#if defined(__linux__)
  for (const Counter& c : counters_) {
    if (c.fd < 0) continue;
    ioctl(c.fd, PERF_EVENT_IOC_RESET, 0);
    ioctl(c.fd, PERF_EVENT_IOC_ENABLE, 0);
  }
#endif
}

void PerfCounters::stop() {
#if defined(__linux__)
  for (const Counter& c : counters_) {
    if (c.fd >= 0) ioctl(c.fd, PERF_EVENT_IOC_DISABLE, 0);
  }
#endif
}

std::vector<CounterValue> PerfCounters::read() const {
  std::vector<CounterValue> out;
  out.reserve(counters_.size());
  for (const Counter& c : counters_) {
    CounterValue v;
    v.event = c.event;
    v.unavailable_reason = c.reason;
#if defined(__linux__)
    if (c.fd >= 0) {
      std::uint64_t data[3] = {0, 0, 0};  // value, time enabled, time running
      const ssize_t got = ::read(c.fd, data, sizeof data);
      if (got != static_cast<ssize_t>(sizeof data)) {
        v.unavailable_reason =
            std::string("read: ") + (got < 0 ? std::strerror(errno) : "short read");
      } else if (data[1] != 0 && data[2] == 0) {
        // Enabled but never scheduled onto a counter: the PMU was busy or absent.
        v.unavailable_reason = "counter never ran (hardware counters busy or virtualised away)";
      } else {
        v.available = true;
        v.running_fraction =
            data[1] != 0 ? static_cast<double>(data[2]) / static_cast<double>(data[1]) : 1.0;
        v.value = data[2] != 0 && data[2] < data[1]
                      ? static_cast<std::uint64_t>(static_cast<double>(data[0]) *
                                                   static_cast<double>(data[1]) /
                                                   static_cast<double>(data[2]))
                      : data[0];
      }
    }
#endif
    out.push_back(std::move(v));
  }
  return out;
}

CounterValue PerfCounters::read(PerfEvent event) const {
  for (CounterValue& v : read()) {
    if (v.event == event) return std::move(v);
  }
  CounterValue v;
  v.event = event;
  v.unavailable_reason = "not requested";
  return v;
}

bool PerfCounters::any_available() const noexcept {
  for (const Counter& c : counters_) {
    if (c.fd >= 0) return true;
  }
  return false;
}

}  // namespace ka::profiler
