// CPU event counters through Linux perf_event_open: task-clock, cycles, instructions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ka::profiler {

/// The events PerfCounters can count.
enum class PerfEvent {
  kTaskClock,     ///< Software: ns the thread was on a CPU.
  kCycles,        ///< Hardware: CPU cycles (user space).
  kInstructions,  ///< Hardware: retired instructions (user space).
};

/// "task-clock", "cycles" or "instructions".
const char* to_string(PerfEvent event) noexcept;

/// One counter's reading, or why there is none.
struct CounterValue {
  PerfEvent event = PerfEvent::kTaskClock;
  bool available = false;
  std::uint64_t value = 0;         ///< Scaled by time enabled / time running when multiplexed.
  double running_fraction = 0.0;   ///< Share of the enabled time the counter was counting.
  std::string unavailable_reason;  ///< E.g. "perf_event_open: Permission denied"; empty if
                                   ///< available.
  /// "cycles=123456" or "cycles=unavailable (perf_event_open: No such file or directory)".
  [[nodiscard]] std::string str() const;
};

/// A set of counters for the calling thread (user space only, so it works under the default
/// perf_event_paranoid=2). Opening never fails: an event the kernel or VM refuses is reported
/// unavailable with the errno text.
///
///   ka::profiler::PerfCounters counters;   // task-clock, cycles, instructions
///   counters.start();
///   work();
///   counters.stop();
///   for (const auto& c : counters.read()) std::cout << c.str() << '\n';
class PerfCounters {
 public:
  explicit PerfCounters(std::vector<PerfEvent> events = {PerfEvent::kTaskClock, PerfEvent::kCycles,
                                                         PerfEvent::kInstructions});
  ~PerfCounters();
  PerfCounters(const PerfCounters&) = delete;
  PerfCounters& operator=(const PerfCounters&) = delete;
  PerfCounters(PerfCounters&& other) noexcept;
  PerfCounters& operator=(PerfCounters&& other) noexcept;

  /// Resets the available counters to zero and starts them.
  void start();
  /// Stops them; read() then returns the counts since start().
  void stop();
  /// The current counts, one per requested event, in the order requested.
  [[nodiscard]] std::vector<CounterValue> read() const;
  /// The reading for `event`; unavailable with a reason when it was not requested.
  [[nodiscard]] CounterValue read(PerfEvent event) const;

  /// Whether any requested counter could be opened.
  [[nodiscard]] bool any_available() const noexcept;

 private:
  struct Counter {
    PerfEvent event;
    int fd = -1;
    std::string reason;
  };
  void close_all() noexcept;
  std::vector<Counter> counters_;
};

}  // namespace ka::profiler
