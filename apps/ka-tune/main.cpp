// ka-tune: sweep a kernel's launch configurations per operator shape; store every trial and
// the winners (the recommendation table the extractor consults).
#include <ka/core/cpu_cores.hpp>
#include <ka/core/error.hpp>
#include <ka/core/interrupt.hpp>
#include <ka/core/logging.hpp>
#include <ka/core/option_checks.hpp>
#include <ka/harness/fusion_tune.hpp>
#include <ka/harness/model_tune.hpp>
#include <ka/harness/suite.hpp>
#include <ka/profiler/measure.hpp>
#include <ka/tuner/search.hpp>
#include <ka/tuner/shards.hpp>
#include <ka/tuner/trial_worker.hpp>
#include <ka/tuner/tune.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "../cli_checks.hpp"
#include "campaign.hpp"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace {

constexpr const char* kAbout =
    "ka-tune: find the best launch configuration of ka's kernel for each shape of an op.\n"
    "Every configuration of the kernel's tunable space that the strategy proposes is run\n"
    "through ka's extractor, checked against libtorch, timed (median, repetitions until the\n"
    "CI95 half-width is within --target-ci of it or the per-config budget ends; hot cache)\n"
    "and stored in the database as it lands; an interrupted sweep (even kill -9) resumes\n"
    "where it stopped when run again, and ka-tunes sweeping the same work on one database at\n"
    "once measure each configuration once (one waits for the other's trial). The best\n"
    "candidates and the default are then timed in 8 paired rounds; one replaces the default\n"
    "only if it was faster in at least 7 of them (a sign test at 95%; else the default wins a\n"
    "tie); winners go to the recommendation table (load it with KA_TUNED_TABLE=<db>).\n"
    "Each configuration runs in a worker process: one that crashes or overruns\n"
    "--trial-timeout is recorded as 'crashed' or 'timeout' and the sweep goes on; a resumed\n"
    "sweep does not run it again (--retry-failed does). SIGINT, SIGTERM or SIGHUP stop the\n"
    "sweep (what finished is stored, the run is marked failed, exit 128 + the signal); a\n"
    "second signal ends ka-tune at once.\n"
    "Beyond one machine: --shard I/N runs the I-th of N disjoint parts of the work (--plan\n"
    "shows them), and --slurm N submits all N as a Slurm job array plus a job that merges\n"
    "their databases into --db (see the README's 'Tuning campaigns on a cluster').";

int fail(int code, const std::string& what) {
  std::fprintf(stderr, "ka-tune: error: %s\n", what.c_str());
  return code;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : text) {
    if (c == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (c != ' ') {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// The command line: the tuner's options and what only ka-tune itself reads.
struct Args {
  ka::tuner::TuneOptions o;
  std::string shapes;
  std::string suite;
  std::string suites_dir;
  std::string model;                      // --model: a TorchScript file
  std::vector<std::string> model_inputs;  // --input NAME:SHAPE
  std::string filter;
  std::string cache = "hot";
  std::string device = "cpu";
  bool replay = false;
  bool in_process = false;
  bool fusion = false;
  bool list = false;
  bool verbose = false;
  bool quiet = false;
  double tolerance = 0.03;
  std::string shard;  // "I/N"
  std::vector<std::string> shard_args;  // what each shard of a --slurm campaign runs
  bool plan = false;
  ka::apps::CampaignOptions campaign;
};

// Declares the options that split the work: shards, the plan, Slurm campaigns.
void add_shard_options(CLI::App& app, Args& a) {
  app.add_option("--shard", a.shard,
                 "I/N: run only the I-th (from 0) of N deterministic, disjoint parts of this "
                 "command's work (whole shapes, or slices of a shape's space when there are "
                 "fewer shapes than shards); the N parts together are the whole work");
  app.add_flag("--plan", a.plan,
               "print the work and its partition into the shards of --shard or --slurm, and "
               "exit without running anything");
  ka::apps::CampaignOptions& c = a.campaign;
  app.add_option("--slurm", c.shards,
                 "submit this command as a Slurm job array of N shards, each into its own "
                 "database, and a merge job after them into --db")
      ->check(ka::apps::whole_number(1));
  app.add_option("--partition", c.partition, "with --slurm: the partition of both jobs");
  app.add_option("--time", c.time, "with --slurm: time limit per shard (sbatch --time)");
  app.add_option("--gres", c.gres, "with --slurm: generic resources per shard, e.g. gpu:1");
  app.add_option("--cpus-per-shard", c.cpus_per_shard,
                 "with --slurm: cores per shard, bound to it (0 = whole nodes, --exclusive); "
                 "ka-tune tunes for the cores it is given")
      ->capture_default_str()
      ->check(ka::apps::whole_number(0));
  app.add_option("--sbatch-arg", c.sbatch_args,
                 "with --slurm: another sbatch option for both jobs, written with '=', e.g. "
                 "--sbatch-arg=--account=proj (repeatable)");
  app.add_option("--campaign", c.dir,
                 "with --slurm: the campaign's folder (shards, scripts, logs), on storage every "
                 "node sees (default: <db>.campaign)");
  app.add_flag("--no-submit", c.no_submit,
               "with --slurm: write the campaign's scripts and print the sbatch commands, "
               "without submitting");
}

// Declares ka-tune's options, bound to `a`.
void add_options(CLI::App& app, Args& a) {
  ka::tuner::TuneOptions& o = a.o;
  app.add_option("--op", o.op,
                 "exact operator overload: aten::mm, aten::addmm, aten::bmm, aten::_softmax, "
                 "aten::layer_norm, aten::sum.dim_IntList, aten::add.Tensor, aten::mul.Tensor, "
                 "aten::relu, aten::gelu, aten::sigmoid, aten::silu, aten::tanh, aten::neg or "
                 "aten::exp");
  app.add_option("--shapes", a.shapes,
                 "comma-separated shapes: MxKxN (mm, addmm), BxMxKxN (bmm), with ':t' when B "
                 "is passed transposed as F.linear's weight is (128x768x3072:t); else the "
                 "input's sizes, e.g. 4096x4096 (softmax, layer_norm and sum over the last dim)");
  app.add_option("--suite", a.suite,
                 "take the shapes of --op's cases from this suite (e.g. matmul)");
  app.add_option("--suites-dir", a.suites_dir, "extra folder searched first for suites");
  app.add_option("--model", a.model,
                 "instead of --op: a TorchScript module file (as ka-bench --model takes it); "
                 "tunes every (operator, shape) the model runs on ka's kernels, then its "
                 "fusion decisions, for ka-bench --model ... --tuned-table");
  app.add_option("--input", a.model_inputs,
                 "with --model, once per forward argument: NAME:SHAPE[:KIND[:LOW..HIGH]], as "
                 "ka-bench --model takes them, e.g. x:1x128x768, ids:1x128:int64:0..30522, "
                 "n=3, or a Tuple or List argument's items as state.0:1x4x64 state.1:1x4x64");
  app.add_option("--strategy", o.strategy, "search strategy (see --list-strategies)")
      ->capture_default_str();
  app.add_option("--budget", o.budget,
                 "configurations run per shape (0 = as many as the strategy wants; one that runs "
                 "exactly as one measured already is free)")
      ->check(ka::apps::whole_number(0));
  app.add_option("--time-budget", o.time_budget_s, "seconds per shape")
      ->check(ka::apps::finite_number(false));
  app.add_option("--seed", o.seed, "seed of the strategy and of the inputs")
      ->capture_default_str()
      ->check(ka::apps::whole_number(0));
  app.add_option("--db", o.db_path, "SQLite database for trials and recommendations")
      ->capture_default_str();
  app.add_flag("--fresh", o.fresh, "measure every configuration again, ignoring stored trials");
  app.add_flag("--retry-failed", o.retry_failed,
               "run again the configurations stored as crashed, timed out or failed (a resumed "
               "sweep keeps them otherwise)");
  app.add_option("--trial-timeout", o.trial_timeout_s,
                 "seconds a configuration may take before its worker is killed and the trial "
                 "recorded as 'timeout' (0 = automatic: 10 s + 3 x --config-budget + 20 x the "
                 "default config's time for the calls a trial makes)")
      ->capture_default_str()
      ->check(ka::apps::finite_number(true));
  app.add_flag("--in-process", a.in_process,
               "run configurations in ka-tune's own process (no worker: a crashing "
               "configuration ends the sweep; for debugging and for measuring isolation's cost)");
  app.add_option("--target-ci", o.measure.target_rel_ci95,
                 "stop timing a config when the CI95 half-width is this fraction of the median")
      ->capture_default_str()
      ->check(ka::apps::finite_number(false));
  app.add_option("--config-budget", o.measure.budget_s, "seconds of timing per configuration")
      ->capture_default_str()
      ->check(ka::apps::finite_number(false));
  app.add_option("--cache", a.cache,
                 "hot: configurations timed back to back; cold: caches flushed before every call "
                 "(trials are kept apart by cache state)")
      ->check(CLI::IsMember({"hot", "cold"}))
      ->capture_default_str();
  app.add_option("--threads", o.threads,
                 "tune for at most this many threads (0 = all cores): the threads tunable and the "
                 "default config it is compared with are limited to it; keep each thread count's "
                 "table in its own --db")
      ->capture_default_str()
      ->check(ka::apps::thread_count());
  app.add_option("--device", a.device,
                 "where ka's kernels run: cpu, or cuda (CUDA device 0: ka's CUDA kernels, timed by "
                 "CUDA events, checked against libtorch on the CPU; trials and winners stored "
                 "under the GPU's fingerprint, so one --db can hold both)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--finalists", o.finalists, "candidates re-measured to separate the winner")
      ->capture_default_str()
      ->check(ka::apps::whole_number(1));
  app.add_flag("--replay", a.replay,
               "do not measure: replay --strategy against the complete sweeps stored in --db and "
               "report the evaluations it needs to get within --tolerance of each optimum");
  app.add_option("--tolerance", a.tolerance, "replay: how close to the optimum counts (0.03 = 3%)")
      ->capture_default_str()
      ->check(ka::apps::finite_number(true));
  app.add_flag("--fusion", a.fusion,
               "with --suite (graph cases, e.g. fused): time each graph fused and unfused and "
               "store the measured fusion decision per pattern and shape; the extractor then "
               "follows it");
  app.add_option("--filter", a.filter, "with --fusion: regex on the case names");
  add_shard_options(app, a);
  app.add_flag("--list-strategies", a.list, "list the strategies and exit");
  app.add_flag("-q,--quiet", a.quiet, "no progress bar");
  app.add_flag("-v,--verbose", a.verbose, "debug logging");
}

// --replay: the evaluations --strategy needs on each complete sweep stored in --db.
int run_replay(const Args& a) {
  const ka::tuner::TuneOptions& o = a.o;
  const auto rows = ka::tuner::replay(o.db_path, o.strategy, o.seed, a.tolerance);
  if (rows.empty()) {
    return fail(1, "no complete sweep in " + o.db_path +
                       " for this device (run ka-tune --strategy exhaustive first)");
  }
  std::vector<double> fractions;
  std::printf("replay of '%s' (seed %llu) against the exhaustive sweeps in %s: evaluations "
              "to get within %.0f%% of the optimum\n",
              o.strategy.c_str(), static_cast<unsigned long long>(o.seed), o.db_path.c_str(),
              a.tolerance * 100);
  for (const auto& r : rows) {
    const double f = static_cast<double>(r.evaluations) / static_cast<double>(r.space);
    fractions.push_back(f);
    std::printf("  %-60s %-18s %4zu of %4zu (%.1f%%)\n", r.shape_key.c_str(), r.kernel.c_str(),
                r.evaluations, r.space, 100 * f);
  }
  std::sort(fractions.begin(), fractions.end());
  std::printf("median over %zu shapes: %.1f%% of the space\n", fractions.size(),
              100 * fractions[fractions.size() / 2]);
  return 0;
}

// --fusion: measured fusion decisions for the graph cases of --suite (or --model's).
int run_fusion(const Args& a) {
  if (a.suite.empty() && a.model.empty()) {
    return fail(2, "--fusion needs --suite (e.g. --suite fused) or --model");
  }
  ka::harness::FusionTuneOptions f;
  f.suite = a.suite;
  f.model = a.model;
  f.model_inputs = a.model_inputs;
  f.suites_dir = a.suites_dir;
  f.filter = a.filter;
  f.db_path = a.o.db_path;
  ka::require_database_file("--db", f.db_path);
  f.command_line = a.o.command_line;
  f.measure = a.o.measure;
  return ka::harness::tune_fusion(f);
}

// ", 3 failed (1 crashed, 1 timed out)", or nothing.
std::string failures(const ka::tuner::ShapeOutcome& r) {
  if (r.failed == 0) return {};
  std::string detail;
  if (r.crashed != 0) detail += fmt::format("{} crashed", r.crashed);
  if (r.timed_out != 0) detail += fmt::format("{}{} timed out", detail.empty() ? "" : ", ", r.timed_out);
  return fmt::format(", {} failed{}", r.failed, detail.empty() ? "" : " (" + detail + ")");
}

// A median for the summary; "-" where nothing was timed (an empty slice, no ok config).
std::string time_or_dash(double ns) {
  return ns > 0 ? ka::profiler::format_duration_ns(ns) : std::string("-");
}

// One line per tuned shape, and a legend.
void print_outcomes(const Args& a, const std::vector<ka::tuner::ShapeOutcome>& outcomes) {
  const ka::tuner::TuneOptions& o = a.o;
  std::printf("\nka-tune: %s on %s, strategy %s, %s (per config: median, CI95 target %.1f%%, "
              "%s cache%s)\n",
              o.op.c_str(), a.device.c_str(), o.strategy.c_str(), o.db_path.c_str(),
              100 * o.measure.target_rel_ci95, a.cache.c_str(),
              a.device == "cuda" ? ", CUDA events" : "");
  std::printf("%-16s %-22s %-56s %10s %10s %7s %s\n", "shape", "kernel", "best config", "best",
              "default", "gain", "configs (new+reused / space)");
  for (const auto& r : outcomes) {
    std::printf("%-16s %-22s %-56s %10s %10s %6.2fx %zu+%zu / %zu%s%s%s%s%s\n", r.shape.c_str(),
                r.kernel.c_str(), r.best_config.c_str(),
                time_or_dash(r.best_median_ns).c_str(), time_or_dash(r.default_median_ns).c_str(),
                r.gain,
                r.evaluated, r.reused, r.space,
                r.equivalent ? fmt::format(", {} equivalent", r.equivalent).c_str() : "",
                r.shared ? fmt::format(", {} shared", r.shared).c_str() : "",
                failures(r).c_str(),
                r.refused ? fmt::format(", {} refused here", r.refused).c_str() : "",
                r.finals_run != 0 ? fmt::format(" (finals of run {})", r.finals_run).c_str()
                : r.separated   ? ""
                                : " (tie with #2)");
  }
  std::printf("(gain = default config's median / best's, both re-measured together; \"tie with "
              "#2\": the best was not faster than the runner-up in 7 of the 8 paired rounds; "
              "\"equivalent\": configs that run exactly as one measured already, given its "
              "time; \"shared\": configs a concurrent ka-tune of the same work on this database "
              "measured, given its time; \"refused here\": configs of the kernel's space it "
              "cannot run for this shape on this device (a micro-kernel width its ISA path "
              "lacks), not swept; \"finals of run N\": that concurrent run timed the finals "
              "and chose the winner)\n");
}

// --op's shapes: --shapes, then the op's cases of --suite. Throws ka::ValueError when none.
std::vector<std::string> shapes_of(const Args& a) {
  std::vector<std::string> shapes = split_list(a.shapes);
  if (!a.suite.empty()) {
    const auto s =
        ka::harness::load_suite_file(ka::harness::find_suite_file(a.suite, a.suites_dir));
    std::size_t found = 0;
    for (const auto& c : s.cases) {
      if (c.op != a.o.op) continue;
      shapes.push_back(fmt::format("{}x{}x{}", c.m, c.k, c.n));
      ++found;
    }
    KA_CHECK(found != 0, "suite '", a.suite, "' has no ", a.o.op, " cases");
  }
  KA_CHECK(!shapes.empty(), "give --shapes or --suite");
  return shapes;
}

// --plan: the work of this command and its partition into shards.
int print_plan(const Args& a, const std::vector<std::string>& shapes) {
  const std::size_t count = std::max<std::size_t>(1, a.campaign.shards);
  const ka::tuner::ShardId id = a.shard.empty() ? ka::tuner::ShardId{count, count}  // none marked
                                                : ka::tuner::parse_shard(a.shard);
  const auto plan = ka::tuner::plan_shards(a.o.op, shapes, id.count);
  std::printf("%s", ka::tuner::describe_plan(a.o.op, plan, id.index).c_str());
  std::printf("cores: this process may use %d (its affinity mask); each shard tunes for the "
              "cores it is given%s\n",
              ka::usable_cores(),
              a.campaign.shards == 0
                  ? ""
                  : a.campaign.cpus_per_shard > 0
                        ? fmt::format(" (--cpus-per-shard {})", a.campaign.cpus_per_shard).c_str()
                        : " (whole nodes: --exclusive)");
  return 0;
}

// --shard I/N: this process's part of the work, as shapes and their slices.
void take_shard(Args& a) {
  const ka::tuner::ShardId id = ka::tuner::parse_shard(a.shard);
  const auto plan = ka::tuner::plan_shards(a.o.op, a.o.shapes, id.count);
  a.o.shapes.clear();
  a.o.slices.clear();
  for (const ka::tuner::ShardItem& item : plan.at(id.index)) {
    a.o.shapes.push_back(item.shape);
    a.o.slices.push_back(item.slice);
  }
}

// Sweeps --op's shapes (or this shard's part of them) and prints the winners.
// --model: every (operator, shape) the model runs on ka's kernels, op by op, then the model's
// fusion decisions.
int run_model_tune(Args& a) {
  if (!a.o.op.empty() || !a.shapes.empty() || !a.suite.empty()) {
    return fail(2, "--model finds the ops and shapes itself: drop --op, --shapes and --suite");
  }
  const ka::harness::ModelTuningWork work =
      ka::harness::model_tuning_work(a.model, a.model_inputs, a.o.threads);
  std::printf("ka-tune --model %s: %zu (operator, shape) pairs run on ka's kernels (from one "
              "checked unfused run)\n",
              a.model.c_str(), work.items.size());
  for (const auto& item : work.items) {
    std::printf("  --op %s --shapes %s   (%s)\n", item.op.c_str(), item.shape.c_str(),
                item.from.c_str());
  }
  for (const auto& why : work.skipped) std::printf("  skipped: %s\n", why.c_str());
  std::vector<std::string> ops;
  for (const auto& item : work.items) {
    if (std::find(ops.begin(), ops.end(), item.op) == ops.end()) ops.push_back(item.op);
  }
  for (const std::string& op : ops) {
    ka::tuner::TuneOptions o = a.o;
    o.op = op;
    o.shapes.clear();
    for (const auto& item : work.items) {
      if (item.op == op) o.shapes.push_back(item.shape);
    }
    std::printf("\n%s at %zu shape(s):\n", op.c_str(), o.shapes.size());
    std::fflush(stdout);
    print_outcomes(a, ka::tuner::tune(o));
  }
  std::printf("\n");
  std::fflush(stdout);
  const int fusion = run_fusion(a);
  std::printf("use it: ka-bench --model %s ... --tuned-table %s\n", a.model.c_str(),
              a.o.db_path.c_str());
  return fusion;
}

int run_tune(Args& a) {
  ka::tuner::TuneOptions& o = a.o;
  if (o.op.empty()) return fail(2, "--op is required (e.g. --op aten::addmm)");
  o.shapes = shapes_of(a);
  if (a.plan) return print_plan(a, o.shapes);
  if (a.campaign.shards != 0) {
    if (!a.shard.empty()) return fail(2, "--slurm makes the shards itself: drop --shard");
    (void)ka::tuner::plan_shards(o.op, o.shapes, a.campaign.shards);  // refuses bad shapes now
    return ka::apps::run_campaign(a.campaign, o.db_path, a.shard_args);
  }
  if (!a.shard.empty()) take_shard(a);
  print_outcomes(a, ka::tuner::tune(o));
  std::printf("see it: ka-db report --db %s --out report.html (convergence and a heatmap of "
              "the tunables per shape, one HTML file)\n",
              o.db_path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ka::tuner::serve_trial_worker_if_asked();  // a trial worker serves and exits here
  Args a;
  for (int i = 0; i < argc; ++i) a.o.command_line += (i ? " " : "") + std::string(argv[i]);
  CLI::App app{kAbout, "ka-tune"};
  add_options(app, a);
  a.shard_args = ka::apps::shard_arguments(argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return fail(2, std::string(e.what()) + "\nRun 'ka-tune --help' for the options.");
  }
  try {
    ka::check_environment();
  } catch (const ka::ValueError& e) {
    return fail(2, e.what());
  }
  if (a.verbose) ka::set_log_level(spdlog::level::debug);
  a.o.measure.mode =
      a.cache == "cold" ? ka::profiler::CacheMode::kCold : ka::profiler::CacheMode::kHot;
  a.o.device = a.device == "cuda" ? ka::DeviceType::kCUDA : ka::DeviceType::kCPU;
  if (a.quiet) a.o.progress = nullptr;
  a.o.isolate = !a.in_process;
  if (a.list) {
    for (const auto& s : ka::tuner::strategy_names()) std::printf("%s\n", s.c_str());
    return 0;
  }
  if ((a.replay || a.fusion) && (!a.shard.empty() || a.plan || a.campaign.shards != 0)) {
    return fail(2, "--shard, --plan and --slurm split a sweep's shapes; --replay and --fusion "
                   "do not sweep");
  }
  if (a.device == "cuda" && (a.replay || a.fusion)) {
    return fail(2, "--replay and --fusion work on the CPU's trials; --device cuda goes with --op");
  }
  try {
    if (a.replay) return run_replay(a);
    if (a.fusion) return run_fusion(a);
    if (!a.model.empty()) return run_model_tune(a);
    KA_CHECK(a.model_inputs.empty(), "--input gives the shapes of --model's inputs");
    return run_tune(a);
  } catch (const ka::Interrupted& e) {
    std::fprintf(stderr, "ka-tune: interrupted by signal %d; what finished is stored in %s and "
                         "the run is marked failed\n",
                 e.signal_number(), a.o.db_path.c_str());
    return e.exit_code();
  } catch (const ka::ValueError& e) {
    return fail(2, e.what());
  } catch (const std::exception& e) {
    return fail(1, e.what());
  }
}
