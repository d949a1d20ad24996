// ka-bench: runs a suite of operator cases through ka and libtorch and compares them.
#include <ka/core/error.hpp>
#include <ka/core/logging.hpp>
#include <ka/core/option_checks.hpp>
#include <ka/harness/bench.hpp>
#include <ka/harness/suite.hpp>
#include <ka/dispatch/dispatcher.hpp>
#include <ka/runtime/aten_ops.hpp>

#include <CLI/CLI.hpp>

#include "../cli_checks.hpp"

#include <cstdio>
#include <string>
#include <vector>

namespace {

int fail(int code, const std::string& what) {
  std::fprintf(stderr, "ka-bench: error: %s\n", what.c_str());
  return code;
}

// The command line as typed (stored with the run); Google Benchmark's flags
// (--benchmark_filter=..., --benchmark_format=json, ...) go to `options` untouched, the rest
// is returned for CLI11.
std::vector<std::string> split_arguments(int argc, char** argv, ka::harness::BenchOptions& options) {
  for (int i = 0; i < argc; ++i) options.command_line += (i ? " " : "") + std::string(argv[i]);
  std::vector<std::string> ka_args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--benchmark_", 0) == 0) {
      options.benchmark_flags.push_back(arg);
    } else {
      ka_args.push_back(arg);
    }
  }
  return ka_args;
}

// The flags that are not BenchOptions.
struct ToolFlags {
  bool list = false;
  bool verbose = false;
  bool no_db = false;
  std::string dump_dispatch;
};

constexpr const char* kDescription =
    "ka-bench: benchmark a suite of operator cases, ka against libtorch.\n"
    "Each case is checked for correctness against libtorch, then timed by Google Benchmark in\n"
    "rounds that take its variants in turn; results go to an SQLite database. Op cases time\n"
    "ka (through its dispatcher, extractor and executor) and libtorch; graph cases (e.g.\n"
    "--suite fused) time ka with fusion, ka unfused and libtorch's TorchScript interpreter.\n"
    "Google Benchmark flags (--benchmark_filter=REGEX, --benchmark_format=json,\n"
    "--benchmark_out=FILE, ...) are passed through.";

// ka-bench's options; the list is long because every option is one declaration.
void add_options(CLI::App& app, ka::harness::BenchOptions& options, ToolFlags& flags) {
  app.add_option("-s,--suite", options.suite, "suite name (see --list-suites) or path to a .yaml file");
  app.add_flag("--list-suites", flags.list, "list the suites found and exit");
  app.add_option("--model", options.model,
                 "instead of --suite: a TorchScript module file (torch.jit.script or trace, "
                 "saved); ka-bench freezes it and times its forward through ka (fused and "
                 "unfused) against libtorch running the same frozen module, after checking "
                 "their outputs agree; --explain shows which nodes ran on ka and which on "
                 "libtorch");
  app.add_option("--input", options.model_inputs,
                 "with --model, once per forward argument: NAME:SHAPE[:KIND[:LOW..HIGH]], e.g. "
                 "x:1x128x768 (fp32 randn; an input named mask gets 0/-1e4), "
                 "mask:1x1x128x128:mask, ids:1x128:int64:0..30522 (integers in [LOW, HIGH), "
                 "default 0..2); KIND: a dtype (float32, int64, int32, bool, float64, float16, "
                 "bfloat16, int16, int8, uint8) or a fill of float32 values (randn, mask, "
                 "causal). A "
                 "non-tensor argument takes NAME=VALUE (an int, a float, true, false, none), "
                 "e.g. n=3 or mask=none; one left out takes forward's default. A Tuple or "
                 "List argument takes its items one by one as NAME.0, NAME.1, ..., e.g. "
                 "state.0:1x4x64 state.1:1x4x64");
  app.add_option("--suites-dir", options.suites_dir, "extra folder searched first for suites");
  app.add_option("--db", options.db_path, "SQLite database for the results")->capture_default_str();
  app.add_flag("--no-db", flags.no_db, "do not write results to a database");
  app.add_option("--tuned-table", options.tuned_table,
                 "take ka's configs from this tuned table (a ka database written by ka-tune, or "
                 "an export); default: KA_TUNED_TABLE if set, else the kernels' heuristics");
  app.add_option("-t,--threads", options.threads,
                 "threads for libtorch and for ka, its kernels and its graph runs alike (0 = all "
                 "logical cores)")
      ->capture_default_str()
      ->check(ka::apps::thread_count());
  app.add_option("--device", options.device,
                 "cpu, or cuda: the suite's op cases on CUDA device 0, ka's CUDA GEMM against "
                 "libtorch's (cuBLAS), timed by CUDA events, %peak against the GPU's datasheet "
                 "fp32 peak; configs from the GPU's rows of the tuned table (ka-tune --device "
                 "cuda); graph cases are left out (they run on the CPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--vs", options.references,
                 "what op cases are timed against, a comma list of: libtorch (at::addmm_out), "
                 "openblas, blis (their cblas_sgemm), onednn (dnnl_sgemm), ka-kernel (ka's GEMM "
                 "kernel called directly, without ka's dispatcher and extractor); each is checked "
                 "against libtorch like ka, runs on --threads, and is stored as impl <name>; the "
                 "summary adds ka/best = fastest reference's time / ka time (ka-kernel is not a "
                 "reference). The libraries are loaded at run time (Debian libopenblas0-pthread, "
                 "libblis4-pthread, libdnnl2); CPU only")
      ->capture_default_str();
  app.add_option("--isa", options.isa,
                 "avx512, avx2 or generic: run ka (KA_CPU_ISA) and every library on that ISA "
                 "family (OPENBLAS_CORETYPE SkylakeX/Haswell/Nehalem, BLIS skx/haswell/penryn, "
                 "ONEDNN_MAX_CPU_ISA AVX512_CORE/AVX2/SSE41); ka-bench sets them and re-executes "
                 "itself, and the header says what each library then runs")
      ->check(CLI::IsMember({"avx512", "avx2", "generic"}));
  app.add_option("-r,--repetitions", options.repetitions, "rounds per case: each round times every variant once, in turn (interleaved); the median over rounds is reported")
      ->capture_default_str()
      ->check(ka::apps::whole_number(1));
  app.add_option("--min-time", options.min_time_s, "minimum seconds of back-to-back calls per round (after one untimed call)")
      ->capture_default_str()
      ->check(ka::apps::finite_number(false));
  app.add_flag("--explain", options.explain,
               "with --suite: run each case's ka variants once (checked against libtorch) and "
               "print the fusion groups, kernels and versions, shape keys, configs with "
               "provenance and task dependencies, then exit; nothing is timed or stored "
               "(--benchmark_filter=REGEX selects cases)");
  app.add_flag("--breakdown", options.breakdown,
               "with --suite: time ka's whole pipeline per case (its dispatcher, extract, "
               "execute; graphs fused) and print how a call's time splits between dispatch, "
               "extraction and kernel execution, from the profiler's spans, and for op cases "
               "the bare kernel's time beside it (pipeline = call - kernel); nothing is stored "
               "(--benchmark_filter=REGEX selects cases)");
  app.add_option("--trace", options.trace_path,
                 "write a Chrome trace (chrome://tracing, Perfetto) of ka's pipeline spans — "
                 "extract, execute, blocks with task ids — and, where CUPTI and a GPU are "
                 "present, GPU kernels and copies");
  app.add_option("--dump-dispatch", flags.dump_dispatch,
                 "print the dispatcher's registration state and computed kernel table of an "
                 "operator ka serves (e.g. aten::addmm) and exit");
  app.add_flag("--isolate", options.isolate,
               "run the cases in a supervised child process: a case that crashes it is stored "
               "as 'crashed' and the rest of the suite runs in a new one (into the same run)");
  app.add_option("--case-timeout", options.case_timeout_s,
                 "seconds a case (all its variants) may take before it is stopped and stored as "
                 "'timeout' (implies --isolate; 0 = no limit)")
      ->check(ka::apps::finite_number(true));
  app.add_flag("-v,--verbose", flags.verbose, "debug logging (or set KA_LOG_LEVEL=debug|trace)");
}

// --dump-dispatch OP: the dispatcher's state and computed table for one of ka's operators.
int dump_dispatch_table(const std::string& name) {
  const auto& served = ka::runtime::register_aten_ops();
  const auto op = ka::dispatch::Dispatcher::singleton().find_op(name);
  if (!op) {
    std::string names;
    for (const auto& n : served) names += (names.empty() ? "" : ", ") + n;
    return fail(2, "operator '" + name + "' is not registered in ka's dispatcher (ka serves: " +
                       names + ")");
  }
  std::printf("%s registration state (c10 dumpState format):\n%s\n", op->name().c_str(),
              op->dump_state().c_str());
  std::printf("%s computed kernel table (c10 dumpComputedTable format):\n%s",
              op->name().c_str(), op->dump_computed_table().c_str());
  op->check_invariants();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ka::harness::BenchOptions options;
  const std::vector<std::string> ka_args = split_arguments(argc, argv, options);
  CLI::App app{kDescription, "ka-bench"};
  ToolFlags flags;
  add_options(app, options, flags);
  std::vector<std::string> reversed(ka_args.rbegin(), ka_args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ka-bench: error: %s\nRun 'ka-bench --help' for the options.\n", e.what());
    return 2;
  }
  if (flags.verbose) ka::set_log_level(spdlog::level::debug);
  options.write_db = !flags.no_db;

  try {
    ka::check_environment();
    if (flags.list) {
      for (const auto& name : ka::harness::list_suites(options.suites_dir)) std::printf("%s\n", name.c_str());
      return 0;
    }
    if (!flags.dump_dispatch.empty()) return dump_dispatch_table(flags.dump_dispatch);
    if (options.suite.empty() && options.model.empty()) {
      return fail(2, "--suite or --model is required (try --list-suites)");
    }
    ka::harness::apply_isa_restriction(options, argv);  // may re-execute ka-bench
    if (options.case_timeout_s > 0) options.isolate = true;
    if (options.isolate) {
      return ka::harness::run_suite_isolated(options, std::vector<std::string>(argv, argv + argc));
    }
    return ka::harness::run_suite(options);
  } catch (const ka::ValueError& e) {
    return fail(2, e.what());
  } catch (const ka::Error& e) {
    return fail(1, e.what());
  } catch (const std::exception& e) {
    return fail(1, e.what());
  }
}
