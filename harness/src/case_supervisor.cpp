// ka-bench --isolate: cases run in a supervised child process. See Note [Isolated cases].
#include "case_supervisor.hpp"

#include <ka/core/error.hpp>
#include <ka/core/interrupt.hpp>
#include <ka/core/subprocess.hpp>
#include <ka/core/text.hpp>
#include <ka/db/results_store.hpp>
#include <ka/harness/bench.hpp>
#include <ka/harness/suite.hpp>

#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

#include <sys/wait.h>
#include <unistd.h>

namespace ka::harness {

// Note [Isolated cases]
// With --isolate (or --case-timeout), ka-bench supervises a child ka-bench (the same binary
// and arguments, started through ka::ChildProcess in its own process group) that runs the
// suite as usual and reports over a socket: the run it stores into, each case as it starts
// (with the case's benchmark names), and that every benchmark ran. When the child dies in a
// case (a signal, an abort, an exit mid-case), or a case overruns --case-timeout (the child
// is killed), the supervisor stores a row for each of that case's benchmarks that has none,
// with the disposition 'crashed' or 'timeout' and the reason, and starts a new child that
// continues the same run (KA_BENCH_RUN_ID) without the cases finished or lost
// (KA_BENCH_SKIP_FILE, names separated by NUL bytes). Each child prints its own header and
// the summary of the cases it ran; the supervisor ends with the cases it lost, marks the run
// failed when there are any, and exits 1 (or the last child's status when that is worse).
// A first SIGINT/SIGTERM/SIGHUP is forwarded to the child once (it finishes the benchmark
// under way and stores what finished); the supervisor then waits for it and starts no
// other; a second signal ends the supervisor, and PR_SET_PDEATHSIG the child.
// For tests, KA_TEST_CASE_FAULT="crash:<case>,hang:<case>" makes a supervised child raise
// SIGSEGV or spin when that case starts; nothing reads it outside a supervised child.

namespace {

constexpr const char* kSupervisorFdVariable = "KA_BENCH_SUPERVISOR_FD";
constexpr const char* kRunIdVariable = "KA_BENCH_RUN_ID";
constexpr const char* kSkipFileVariable = "KA_BENCH_SKIP_FILE";
constexpr const char* kFaultVariable = "KA_TEST_CASE_FAULT";

// The test-only fault KA_TEST_CASE_FAULT names for `case_name`: "crash", "hang" or "".
std::string test_fault_for(const std::string& case_name) {
  const char* spec = std::getenv(kFaultVariable);
  if (spec == nullptr) return {};
  for (const std::string_view item : split(spec, ',')) {
    const auto colon = item.find(':');
    if (colon != std::string_view::npos && item.substr(colon + 1) == case_name) {
      return std::string(item.substr(0, colon));
    }
  }
  return {};
}

void run_test_fault(const std::string& fault) {
  if (fault == "crash") std::raise(SIGSEGV);
  if (fault == "hang") {
    volatile std::int64_t spins = 0;
    for (;;) spins = spins + 1;
  }
}

std::set<std::string> read_skip_file(const char* path) {
  std::set<std::string> names;
  if (path == nullptr) return names;
  std::ifstream in(path, std::ios::binary);
  KA_CHECK_TYPE(IoError, in.good(), kSkipFileVariable, ": cannot read '", path, "'");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\0', start);
    names.insert(text.substr(start, end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return names;
}

// A case the child died in or overran.
struct LostCase {
  std::string name;
  std::vector<std::string> benchmarks;
  db::Disposition disposition = db::Disposition::kCrashed;
  std::string reason;
};

// One child ka-bench, watched until it ends.
struct ChildOutcome {
  bool finished = false;  // it reported every benchmark ran
  int status = 0;         // its wait status
  std::optional<LostCase> lost;
  int forwarded_signal = 0;
};

class CaseSupervisor {
 public:
  CaseSupervisor(const BenchOptions& options, std::vector<std::string> argv)
      : options_(options),
        argv_(std::move(argv)),
        suite_(load_bench_suite(options)),
        skip_file_(std::filesystem::temp_directory_path() /
                   fmt::format("ka-bench-skip-{}", ::getpid())) {}
  ~CaseSupervisor() {
    std::error_code ignored;
    std::filesystem::remove(skip_file_, ignored);
  }

  int run() {
    const InterruptScope stop_on_signal;
    ChildOutcome child;
    for (;;) {
      child = run_child();
      if (child.finished || !child.lost || child.forwarded_signal != 0) break;
      lost_.push_back(*child.lost);
      store_lost(*child.lost);
      skipped_.push_back(child.lost->name);
      if (skipped_.size() >= suite_.cases.size()) break;  // nothing left to run
    }
    if (child.lost && child.forwarded_signal != 0) {  // stopped by a signal, not lost
      std::fprintf(stderr, "ka-bench: interrupted by signal %d in case %s\n",
                   child.forwarded_signal, child.lost->name.c_str());
    }
    return finish(child);
  }

 private:
  ChildOutcome run_child();
  void write_skip_file() const;
  void store_lost(const LostCase& lost) const;
  int finish(const ChildOutcome& last);

  const BenchOptions& options_;
  const std::vector<std::string> argv_;
  const Suite suite_;
  const std::filesystem::path skip_file_;
  std::vector<std::string> skipped_;  // cases finished or lost, in order
  std::vector<LostCase> lost_;
  std::int64_t run_id_ = 0;
};

void CaseSupervisor::write_skip_file() const {
  std::ofstream out(skip_file_, std::ios::binary | std::ios::trunc);
  for (const std::string& name : skipped_) out << name << '\0';
  KA_CHECK_TYPE(IoError, out.good(), "cannot write ", skip_file_.string());
}

ChildOutcome CaseSupervisor::run_child() {
  write_skip_file();
  std::vector<std::string> env = {std::string(kSkipFileVariable) + "=" + skip_file_.string()};
  if (run_id_ > 0) env.push_back(fmt::format("{}={}", kRunIdVariable, run_id_));
  ChildProcess child(argv_, env, kSupervisorFdVariable);
  ChildOutcome out;
  std::optional<LostCase> current;
  std::optional<ChildProcess::Clock::time_point> deadline;
  bool timed_out = false;
  const auto wait = [&] {
    for (;;) {
      const auto w = child.wait_readable(deadline, out.forwarded_signal == 0);
      if (w == ChildProcess::Wait::kReadable) return;
      if (w == ChildProcess::Wait::kInterrupted) {
        out.forwarded_signal = interrupt_signal();
        child.signal(out.forwarded_signal);
        continue;
      }
      timed_out = true;  // kDeadline: the read that follows sees the end of file
      child.kill_and_reap();
      return;
    }
  };
  std::vector<std::string> message;
  while (read_message(child.fd(), message, wait)) {
    if (message.size() == 2 && message[0] == "run") {
      run_id_ = std::strtoll(message[1].c_str(), nullptr, 10);
    } else if (message.size() >= 2 && message[0] == "case") {
      if (current) skipped_.push_back(current->name);  // the case before it finished
      current = LostCase{message[1], {message.begin() + 2, message.end()}, {}, {}};
      if (options_.case_timeout_s > 0) {
        deadline = ChildProcess::Clock::now() +
                   std::chrono::duration_cast<ChildProcess::Clock::duration>(
                       std::chrono::duration<double>(options_.case_timeout_s));
      }
    } else if (message.size() == 1 && message[0] == "done") {
      out.finished = true;
      current.reset();
    }
  }
  out.status = child.reap(std::chrono::seconds(5));
  if (!out.finished && current) {
    current->disposition = timed_out ? db::Disposition::kTimeout : db::Disposition::kCrashed;
    current->reason = timed_out ? fmt::format("stopped after --case-timeout {} s", options_.case_timeout_s)
                                : "the case's process " + describe_wait_status(out.status);
    out.lost = std::move(current);
  }
  KA_CHECK_TYPE(Error, out.finished || out.lost || out.forwarded_signal != 0,
                "ka-bench's case runner ", describe_wait_status(out.status),
                " before its first case");
  return out;
}

// A row for each benchmark of `lost` that the child did not store.
void CaseSupervisor::store_lost(const LostCase& lost) const {
  std::fprintf(stderr, "ka-bench: case %s: %s: %s; the suite goes on\n", lost.name.c_str(),
               std::string(db::to_string(lost.disposition)).c_str(), lost.reason.c_str());
  if (!options_.write_db || run_id_ == 0) return;
  db::ResultsStore store(options_.db_path);
  std::set<std::string> stored;
  auto st = store.connection().prepare("SELECT benchmark_name FROM results WHERE run_id = ?1");
  st.bind(1, run_id_);
  while (st.step()) stored.insert(st.column_text(0));
  const SuiteCase* c = nullptr;
  for (const SuiteCase& candidate : suite_.cases) {
    if (candidate.name == lost.name) c = &candidate;
  }
  std::vector<db::ResultRow> rows;
  for (const std::string& name : lost.benchmarks) {
    if (stored.count(name) != 0) continue;
    db::ResultRow r;
    r.suite = suite_.name;
    r.case_name = lost.name;
    r.impl = name.substr(name.rfind('/') + 1);
    r.benchmark_name = name;
    if (c != nullptr) {
      r.op = c->is_graph() ? "graph:" + c->graph : c->op;
      r.m = c->m;
      r.n = c->n;
      r.k = c->k;
      r.dtype = c->dtype;
    }
    r.disposition = lost.disposition;
    r.error = lost.reason;
    rows.push_back(std::move(r));
  }
  store.add_results(run_id_, rows);
}

// The lost cases, the run marked failed when there are any, and the exit status.
int CaseSupervisor::finish(const ChildOutcome& last) {
  int code = WIFEXITED(last.status) ? WEXITSTATUS(last.status) : 1;
  if (last.forwarded_signal != 0) code = 128 + last.forwarded_signal;
  if (lost_.empty()) return code;
  std::printf("\nisolated cases (--isolate): %zu lost\n", lost_.size());
  for (const LostCase& l : lost_) {
    std::printf("  %-40s %-8s %s\n", l.name.c_str(),
                std::string(db::to_string(l.disposition)).c_str(), l.reason.c_str());
  }
  if (options_.write_db && run_id_ > 0) {
    db::ResultsStore(options_.db_path).finish_run(run_id_, false);
    std::printf("run %lld marked failed\n", static_cast<long long>(run_id_));
  }
  return code == 0 ? 1 : code;
}

}  // namespace

namespace detail {

SupervisedRun* SupervisedRun::current() {
  static SupervisedRun* const run = []() -> SupervisedRun* {
    const char* fd = std::getenv(kSupervisorFdVariable);
    if (fd == nullptr) return nullptr;
    const char* id = std::getenv(kRunIdVariable);
    return new SupervisedRun(std::atoi(fd), id != nullptr ? std::strtoll(id, nullptr, 10) : 0,
                             read_skip_file(std::getenv(kSkipFileVariable)));
  }();
  return run;
}

void SupervisedRun::report_run(std::int64_t run_id) {
  send_message(fd_, {"run", std::to_string(run_id)});
}

void SupervisedRun::report_case(const std::string& name,
                                const std::vector<std::string>& benchmarks) {
  std::vector<std::string> message = {"case", name};
  message.insert(message.end(), benchmarks.begin(), benchmarks.end());
  send_message(fd_, message);
  run_test_fault(test_fault_for(name));
}

void SupervisedRun::report_done() { send_message(fd_, {"done"}); }

}  // namespace detail

int run_suite_isolated(const BenchOptions& options, const std::vector<std::string>& argv) {
  if (detail::SupervisedRun::current() != nullptr || options.explain || options.breakdown) {
    return run_suite(options);  // the child itself; plans and breakdowns run in one process
  }
  return CaseSupervisor(options, argv).run();
}

}  // namespace ka::harness
