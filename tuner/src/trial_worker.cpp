// Isolated trials: ka-tune's supervisor and the worker process it talks to.
#include "trial_runner.hpp"

#include <ka/core/error.hpp>
#include <ka/core/interrupt.hpp>
#include <ka/core/logging.hpp>
#include <ka/core/subprocess.hpp>
#include <ka/executor/cuda_executor.hpp>
#include <ka/kernels/cpu_launch.hpp>
#include <ka/tuner/trial_worker.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <vector>


namespace ka::tuner {

// Note [Isolated trials]
// A configuration nobody has run before may crash (a signal, an abort, a CUDA sticky error)
// or never finish. ka-tune therefore runs trials in a worker process: this program again
// (/proc/self/exe, so a test's own kernels are there too), started with the environment
// variable KA_TRIAL_WORKER_FD naming its end of a socket pair, in its own process group (a
// Ctrl-C at the terminal reaches only the supervisor) and with PR_SET_PDEATHSIG, so it dies
// with the supervisor even after kill -9. The supervisor sends the options once, then one
// request at a time: "shape i" (the worker builds the shape's inputs from the same seed,
// computes libtorch's reference and times one default call), "trial <config>", "finals".
// Every request has a deadline; a worker that dies gives the trial the disposition
// 'crashed' (with the signal or exit status), one that overruns is killed (SIGKILL) and the
// trial is 'timeout'. A worker that survives but can no longer be trusted says so instead of
// answering, and ends: after every request it checks whether a kernel called
// mark_trial_worker_unusable() and, on a CUDA device, whether a sticky error broke its context
// (executor::cuda_context_error(): every later CUDA call would fail, so without this one bad
// configuration would fail all that follow); the trial is 'crashed' with that reason. The next
// request starts a new worker, which is given the options and the current shape again. A worker serves every trial of a run, so isolation costs a process
// start per run (and per lost worker), one shape build per shape in each process, and a
// message per trial.
// The deadline of a trial (--trial-timeout, else automatic) is 10 s + 3 x --config-budget +
// 20 x the calls a trial makes at least (warm-up, 6 samples, the checked run, the pack) x the
// default configuration's time: a configuration 20 times slower than the default still
// finishes. The finals' deadline is that of a trial for each candidate, twice (their rounds
// take 2 x --config-budget in all). Building a shape (its reference included) has 600 s.

namespace {

constexpr const char* kWorkerFdVariable = "KA_TRIAL_WORKER_FD";
constexpr double kShapeDeadlineS = 600.0;

bool g_serves_workers = false;
bool g_in_worker = false;
// mark_trial_worker_unusable's first reason; kernels may call it from their pool's threads.
std::mutex g_unusable_mutex;
std::string g_unusable;

using Frame = std::vector<std::string>;  // a message: see ka::send_message

std::string num(double v) { return fmt::format("{:.17g}", v); }

double to_double(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  KA_CHECK_TYPE(IoError, !s.empty() && end != nullptr && *end == '\0',
                "trial worker: bad number '", s, "' in a message");
  return v;
}

std::int64_t to_int(const std::string& s) { return static_cast<std::int64_t>(to_double(s)); }

// ---- what crosses the socket: options, outcomes, finals -------------------------------------

Frame options_frame(const TuneOptions& o) {
  const profiler::MeasureOptions& m = o.measure;
  Frame f = {"options",
             o.op,
             std::to_string(o.seed),
             std::to_string(o.threads),
             std::to_string(static_cast<int>(o.device)),
             std::to_string(m.warmup_runs),
             num(m.warmup_s),
             std::to_string(m.min_repetitions),
             std::to_string(m.max_repetitions),
             num(m.target_rel_ci95),
             std::to_string(static_cast<int>(m.ci_of)),
             num(m.budget_s),
             std::to_string(static_cast<int>(m.mode)),
             std::to_string(m.batch),
             num(m.min_sample_s),
             std::to_string(m.flush_bytes)};
  f.insert(f.end(), o.shapes.begin(), o.shapes.end());
  return f;
}

constexpr std::size_t kOptionFields = 16;

TuneOptions options_of(const Frame& f) {
  KA_CHECK_TYPE(IoError, f.size() >= kOptionFields && f[0] == "options",
                "trial worker: expected the options first");
  TuneOptions o;
  o.op = f[1];
  o.seed = std::strtoull(f[2].c_str(), nullptr, 10);
  o.threads = static_cast<int>(to_int(f[3]));
  o.device = static_cast<DeviceType>(to_int(f[4]));
  profiler::MeasureOptions& m = o.measure;
  m.warmup_runs = static_cast<int>(to_int(f[5]));
  m.warmup_s = to_double(f[6]);
  m.min_repetitions = static_cast<int>(to_int(f[7]));
  m.max_repetitions = static_cast<int>(to_int(f[8]));
  m.target_rel_ci95 = to_double(f[9]);
  m.ci_of = static_cast<profiler::CiOf>(to_int(f[10]));
  m.budget_s = to_double(f[11]);
  m.mode = static_cast<profiler::CacheMode>(to_int(f[12]));
  m.batch = static_cast<int>(to_int(f[13]));
  m.min_sample_s = to_double(f[14]);
  m.flush_bytes = to_int(f[15]);
  o.shapes.assign(f.begin() + kOptionFields, f.end());
  o.progress = nullptr;
  return o;
}

Frame outcome_frame(const detail::TrialOutcome& r) {
  return {"outcome",
          std::to_string(static_cast<int>(r.disposition)),
          r.error,
          num(r.median_ns),
          num(r.mean_ns),
          num(r.min_ns),
          num(r.max_ns),
          num(r.stddev_ns),
          r.ci95_ns ? num(*r.ci95_ns) : std::string(),
          std::to_string(r.repetitions)};
}

detail::TrialOutcome outcome_of(const Frame& f) {
  KA_CHECK_TYPE(IoError, f.size() == 10 && f[0] == "outcome", "trial worker: bad trial reply");
  detail::TrialOutcome r;
  const std::int64_t d = to_int(f[1]);
  KA_CHECK_TYPE(IoError, d >= 0 && d < static_cast<std::int64_t>(std::size(db::kDispositions)),
                "trial worker: bad disposition ", d);
  r.disposition = db::kDispositions[d];
  r.error = f[2];
  r.median_ns = to_double(f[3]);
  r.mean_ns = to_double(f[4]);
  r.min_ns = to_double(f[5]);
  r.max_ns = to_double(f[6]);
  r.stddev_ns = to_double(f[7]);
  if (!f[8].empty()) r.ci95_ns = to_double(f[8]);
  r.repetitions = to_int(f[9]);
  return r;
}

// "finals", n, n configs, then kFinalRounds x n medians.
Frame finals_frame(const detail::Finals& finals) {
  Frame f = {"finals", std::to_string(finals.configs.size())};
  for (const LaunchConfig& c : finals.configs) f.push_back(c.str());
  for (const FinalRound& round : finals.rounds) {
    for (const double t : round) f.push_back(num(t));
  }
  return f;
}

detail::Finals finals_of(const Frame& f) {
  KA_CHECK_TYPE(IoError, f.size() >= 2 && f[0] == "finals", "trial worker: bad finals reply");
  const auto n = static_cast<std::size_t>(to_int(f[1]));
  KA_CHECK_TYPE(IoError, f.size() == 2 + n + kFinalRounds * n, "trial worker: bad finals reply");
  detail::Finals finals;
  for (std::size_t j = 0; j < n; ++j) finals.configs.push_back(LaunchConfig::parse(f[2 + j]));
  finals.rounds.assign(kFinalRounds, FinalRound(n));
  for (std::size_t r = 0; r < kFinalRounds; ++r) {
    for (std::size_t j = 0; j < n; ++j) finals.rounds[r][j] = to_double(f[2 + n + r * n + j]);
  }
  return finals;
}

// ---- the worker -----------------------------------------------------------------------------

// Answers one request about the current shape (built by a "shape" request).
Frame answer(const TuneOptions& o, const Frame& request,
             std::unique_ptr<detail::ShapeTrials>& shape) {
  const std::string& kind = request.at(0);
  if (kind == "shape") {
    shape.reset();
    shape = std::make_unique<detail::ShapeTrials>(
        o, static_cast<std::size_t>(to_int(request.at(1))), detail::ShapeTrials::Use::kTrials);
    return {"ready", num(shape->time_default_call())};
  }
  KA_CHECK_TYPE(IoError, shape != nullptr, "trial worker: '", kind, "' before any shape");
  if (kind == "trial") return outcome_frame(shape->run_trial(LaunchConfig::parse(request.at(1))));
  if (kind == "finals") {
    std::vector<LaunchConfig> finalists;
    for (std::size_t j = 1; j < request.size(); ++j) {
      finalists.push_back(LaunchConfig::parse(request[j]));
    }
    return finals_frame(shape->time_finals(finalists));
  }
  KA_THROW(IoError, "trial worker: unknown request '", kind, "'");
}

// Why this worker must not serve another request (mark_trial_worker_unusable, or a CUDA
// context a sticky error broke), or empty.
std::string unusable_reason(const TuneOptions& o) {
  {
    const std::lock_guard<std::mutex> lock(g_unusable_mutex);
    if (!g_unusable.empty()) return g_unusable;
  }
  if (o.device != DeviceType::kCUDA) return {};
  const std::string cuda = executor::cuda_context_error();
  return cuda.empty() ? cuda : "the CUDA context is lost (" + cuda + ")";
}

int serve(int fd) {
  Frame f;
  if (!read_message(fd, f)) return 0;
  const TuneOptions o = options_of(f);
  kernels::set_cpu_thread_limit(o.threads);
  std::unique_ptr<detail::ShapeTrials> shape;
  while (read_message(fd, f)) {
    Frame reply;
    try {
      reply = answer(o, f, shape);
    } catch (const std::exception& e) {
      reply = {"error", e.what()};
    }
    // A worker that cannot be trusted any more says why instead of answering, and ends.
    if (std::string why = unusable_reason(o); !why.empty()) {
      return send_message(fd, {"unusable", std::move(why)}) ? 0 : 1;
    }
    if (!send_message(fd, reply)) return 1;
  }
  return 0;
}

// ---- the supervisor -------------------------------------------------------------------------

// Why a worker could not answer: it died (kCrashed) or overran its deadline (kTimeout).
struct WorkerLost {
  db::Disposition disposition;
  std::string reason;
};

// One worker process and its socket. See Note [Isolated trials].
class WorkerProcess {
 public:
  WorkerProcess() : child_({"ka-trial-worker"}, {}, kWorkerFdVariable) {}

  // Sends `request` and returns the reply. Throws WorkerLost when the worker dies or does not
  // answer within `deadline_s` (then it is killed), ka::Interrupted when a stop signal arrives
  // while waiting (the worker is killed: the item under way is abandoned).
  Frame request(const Frame& request, double deadline_s) {
    tell(request);
    const auto until = ChildProcess::Clock::now() +
                       std::chrono::duration_cast<ChildProcess::Clock::duration>(
                           std::chrono::duration<double>(deadline_s));
    const auto wait = [&] {
      switch (child_.wait_readable(until)) {
        case ChildProcess::Wait::kReadable:
          return;
        case ChildProcess::Wait::kInterrupted:
          child_.kill_and_reap();
          throw Interrupted(interrupt_signal());
        case ChildProcess::Wait::kDeadline:
          child_.kill_and_reap();
          throw WorkerLost{db::Disposition::kTimeout,
                           fmt::format("no result within the deadline of {:.3g} s (see "
                                       "--trial-timeout); the worker process was killed",
                                       deadline_s)};
      }
    };
    Frame reply;
    if (!read_message(child_.fd(), reply, wait)) throw lost();
    if (!reply.empty() && reply[0] == "unusable") {
      child_.kill_and_reap();
      throw WorkerLost{db::Disposition::kCrashed,
                       "the worker process could run no more trials: " +
                           (reply.size() > 1 ? reply[1] : std::string("no reason given")) +
                           "; it was replaced"};
    }
    return reply;
  }

  // Sends without waiting for a reply (the options).
  void tell(const Frame& message) {
    if (!send_message(child_.fd(), message)) throw lost();
  }

 private:
  // The worker is gone (end of file or a failed write): how it ended.
  WorkerLost lost() {
    return {db::Disposition::kCrashed,
            "the worker process " + describe_wait_status(child_.reap(std::chrono::seconds(5)))};
  }

  ChildProcess child_;
};

// The deadline of one trial of a shape whose default call takes `default_call_ns`.
double trial_deadline_s(const TuneOptions& o, double default_call_ns) {
  if (o.trial_timeout_s > 0) return o.trial_timeout_s;
  const double calls = o.measure.warmup_runs + std::max(6, o.measure.min_repetitions) + 2;
  return 10.0 + 3.0 * o.measure.budget_s + 20.0 * calls * default_call_ns * 1e-9;
}

class WorkerTrials final : public detail::TrialRunner {
 public:
  explicit WorkerTrials(const TuneOptions& o) : o_(o), options_(options_frame(o)) {
    KA_CHECK_TYPE(InternalError, serves_trial_workers(),
                  "isolated trials need this program's main() to call "
                  "ka::tuner::serve_trial_worker_if_asked() first");
  }

  // The worker (if any) builds the new shape when it is next asked for a trial: it stays.
  void begin_shape(std::size_t index, const detail::ShapeTrials&) override {
    shape_ = {"shape", std::to_string(index)};
    shape_name_ = o_.shapes.at(index);
  }

  detail::TrialOutcome run_trial(const LaunchConfig& point) override {
    try {
      const Frame reply = ready_worker().request({"trial", point.str()}, deadline_s_);
      return outcome_of(checked(reply));
    } catch (const WorkerLost& lost) {
      worker_.reset();
      detail::TrialOutcome out;
      out.disposition = lost.disposition;
      out.error = lost.reason;
      return out;
    }
  }

  std::optional<detail::Finals> time_finals(const std::vector<LaunchConfig>& finalists) override {
    Frame request = {"finals"};
    for (const LaunchConfig& c : finalists) request.push_back(c.str());
    try {
      WorkerProcess& worker = ready_worker();  // sets the shape's trial deadline
      const double deadline = 2.0 * deadline_s_ * static_cast<double>(finalists.size() + 1);
      return finals_of(checked(worker.request(request, deadline)));
    } catch (const WorkerLost& lost) {
      worker_.reset();
      log().warn("{}: the finals were lost ({}); nothing recommended for this shape", shape_name_,
                 lost.reason);
      return std::nullopt;
    }
  }

 private:
  // The worker, holding the current shape: started and given the options when there is none,
  // asked to build the shape when it holds another.
  WorkerProcess& ready_worker() {
    if (worker_ && worker_shape_ == shape_) return *worker_;
    if (!worker_) {
      worker_ = std::make_unique<WorkerProcess>();
      worker_shape_.clear();
      worker_->tell(options_);
    }
    try {
      const Frame ready = checked(worker_->request(shape_, kShapeDeadlineS));
      KA_CHECK_TYPE(IoError, ready.size() == 2 && ready[0] == "ready",
                    "trial worker: bad reply to a shape");
      deadline_s_ = trial_deadline_s(o_, to_double(ready[1]));
    } catch (const WorkerLost& lost) {
      worker_.reset();
      KA_THROW(Error, "shape ", shape_name_, ": the trial worker could not build it: ",
               lost.reason);
    }
    worker_shape_ = shape_;
    return *worker_;
  }

  // A reply, or the worker's own error (a ka::Error outside any trial) rethrown here.
  static const Frame& checked(const Frame& reply) {
    if (!reply.empty() && reply[0] == "error") {
      KA_THROW(Error, reply.size() > 1 ? reply[1] : std::string("trial worker failed"));
    }
    return reply;
  }

  const TuneOptions& o_;
  const Frame options_;
  Frame shape_;
  std::string shape_name_;
  double deadline_s_ = 0.0;
  std::unique_ptr<WorkerProcess> worker_;
  Frame worker_shape_;  // the "shape i" request worker_ last answered
};

class InProcessTrials final : public detail::TrialRunner {
 public:
  void begin_shape(std::size_t, const detail::ShapeTrials& local) override { shape_ = &local; }
  detail::TrialOutcome run_trial(const LaunchConfig& point) override {
    return shape_->run_trial(point);
  }
  std::optional<detail::Finals> time_finals(const std::vector<LaunchConfig>& finalists) override {
    return shape_->time_finals(finalists);
  }

 private:
  const detail::ShapeTrials* shape_ = nullptr;
};

// Note [Workers ignore stop signals]
// A worker ends when its supervisor says so or kills it (SIGKILL: a stop signal abandons the
// trial under way, Note [Isolated trials]), or with the supervisor (PR_SET_PDEATHSIG). Its own
// process group keeps a terminal's Ctrl-C from it, but a batch system signals every process of
// a job: scancel sent SIGTERM to the worker as well, the worker died first, and the
// supervisor, not yet told, recorded the trial under way as 'crashed'. A resumed sweep keeps
// such a trial and, with no result for its canonical form, measured an equivalent
// configuration in its place (slurm.ka_tune.campaign then found a trial the unsharded sweep
// did not have). So a worker ignores SIGINT, SIGTERM and SIGHUP and leaves them to the
// supervisor.
void ignore_stop_signals() {
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, SIG_IGN);
}

}  // namespace

void serve_trial_worker_if_asked() {
  g_serves_workers = true;
  const char* fd_text = std::getenv(kWorkerFdVariable);
  if (fd_text == nullptr) return;
  const int fd = std::atoi(fd_text);
  ::unsetenv(kWorkerFdVariable);
  g_in_worker = true;
  ignore_stop_signals();
  int code = 1;
  try {
    code = serve(fd);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ka trial worker: %s\n", e.what());
  }
  std::exit(code);
}

bool serves_trial_workers() noexcept { return g_serves_workers; }

void mark_trial_worker_unusable(const std::string& why) {
  if (g_in_worker) {
    const std::lock_guard<std::mutex> lock(g_unusable_mutex);
    if (g_unusable.empty()) g_unusable = why;
    return;
  }
  log().warn("this process can run no more trials it could trust: {}", why);
}

namespace detail {

std::unique_ptr<TrialRunner> in_process_trials() { return std::make_unique<InProcessTrials>(); }
std::unique_ptr<TrialRunner> worker_trials(const TuneOptions& o) {
  return std::make_unique<WorkerTrials>(o);
}

}  // namespace detail
}  // namespace ka::tuner
