// Differential test: random registration scenarios applied to c10's dispatcher (the oracle,
// through torch::Library) and to ka's, comparing which kernel runs and the computed tables.
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <torch/library.h>
#include <torch/version.h>

#include <ka/dispatch/dispatcher.hpp>
#include <ka/dispatch/guards.hpp>
#include <ka/dispatch/library.hpp>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace ka::dispatch {
namespace {

constexpr int kScenarios = 600;
constexpr unsigned kSeed = 20261130;
constexpr int kMaxKernels = 24;

// ---- Kernels: kernel N returns N, on both sides ----

template <int N>
void c10_kernel(const c10::OperatorHandle& /*op*/, c10::DispatchKeySet /*ks*/,
                torch::jit::Stack* s) {
  s->pop_back();
  s->emplace_back(std::int64_t{N});
}
template <int N>
void ka_kernel(const OperatorHandle& /*op*/, DispatchKeySet /*ks*/, Stack* s) {
  s->pop_back();
  s->emplace_back(std::int64_t{N});
}

// Typed variants, so both sides also exercise their boxing/unboxing adapters.
template <int N>
std::int64_t typed_kernel(const c10::optional<at::Tensor>& /*x*/) {
  return N;
}

using C10Factory = torch::CppFunction (*)();
template <int N>
torch::CppFunction make_c10_kernel() {
  return torch::CppFunction::makeFromBoxedFunction<&c10_kernel<N>>();
}
template <int N>
torch::CppFunction make_c10_typed_kernel() {
  return torch::CppFunction::makeFromUnboxedFunction(TORCH_FN(typed_kernel<N>));
}
template <int... N>
std::vector<C10Factory> c10_factories(std::integer_sequence<int, N...>) {
  return {&make_c10_kernel<N>...};
}
template <int... N>
std::vector<C10Factory> c10_typed_factories(std::integer_sequence<int, N...>) {
  return {&make_c10_typed_kernel<N>...};
}
template <int... N>
std::vector<KernelFunction::BoxedFn> ka_kernels(std::integer_sequence<int, N...>) {
  return {&ka_kernel<N>...};
}
using TypedFn = std::int64_t (*)(const c10::optional<at::Tensor>&);
template <int... N>
std::vector<TypedFn> ka_typed_kernels(std::integer_sequence<int, N...>) {
  return {&typed_kernel<N>...};
}

/// dumpState with the kernels' inferred schemas (which c10 prints and ka does not compute)
/// replaced by "<schema>".
std::string normalise_state(const std::string& dump) {
  std::istringstream in(dump);
  std::string line;
  std::string out;
  while (std::getline(in, line)) {
    const std::size_t sep = line.find(" :: ");
    const std::size_t state = line.rfind(" [ ");
    if (sep != std::string::npos && state != std::string::npos && state > sep) {
      line = line.substr(0, sep) + " :: <schema>" + line.substr(state);
    }
    out += line + "\n";
  }
  return out;
}

/// "registered at kid<N>:0" on both sides (c10 builds it from the Library's file and line).
const char* kernel_file(int id) {
  static const std::vector<std::string> files = [] {
    std::vector<std::string> out;
    for (int i = 0; i < kMaxKernels; ++i) out.push_back("kid" + std::to_string(i));
    return out;
  }();
  return files[static_cast<std::size_t>(id)].c_str();
}
std::string kernel_debug(int id) { return "registered at " + std::string(kernel_file(id)) + ":0"; }

// libtorch 1.13 prints its overwrite warning on every overwrite; keep the test output readable.
#if TORCH_VERSION_MAJOR < 2
struct QuietWarnings : c10::WarningHandler {
  void process(const c10::SourceLocation&, const std::string&, const bool) override {}
};
using WarningHandlerGuard = c10::Warning::WarningHandlerGuard;
#else
struct QuietWarnings : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};
using WarningHandlerGuard = c10::WarningUtils::WarningHandlerGuard;
#endif

// ---- One registration, on both sides ----

struct Registration {
  std::unique_ptr<torch::Library> c10_lib;
  std::unique_ptr<Library> ka_lib;
  std::optional<DispatchKey> fallback_key;  ///< Set for backend fallbacks.
  std::string what;
};

c10::DispatchKey to_c10(DispatchKey k) { return c10::parseDispatchKey(to_string(k)); }

// ---- Outcomes ----

/// The first sentence of an error message ("Could not run 'kadiff::op_3' with arguments from
/// the 'CPU' backend.").
std::string first_sentence(const char* what) {
  const std::string msg = what;
  const std::size_t end = msg.find(". ");
  return msg.substr(0, end == std::string::npos ? msg.size() : end + 1);
}

/// "kernel <id>", "not implemented: <first sentence>" or "error".
std::string outcome_c10(const c10::OperatorHandle& op, const at::Tensor* x, bool below_autograd) {
  torch::jit::Stack stack;
  if (x != nullptr) {
    stack.emplace_back(*x);
  } else {
    stack.emplace_back(c10::IValue());
  }
  try {
    std::unique_ptr<at::AutoDispatchBelowAutograd> guard;
    if (below_autograd) guard = std::make_unique<at::AutoDispatchBelowAutograd>();
    op.callBoxed(&stack);
    return "kernel " + std::to_string(stack.back().toInt());
  } catch (const c10::NotImplementedError& e) {
    return "not implemented: " + first_sentence(e.what_without_backtrace());
  } catch (const c10::Error&) {
    return "error";
  }
}

std::string outcome_ka(const OperatorHandle& op, const at::Tensor* x, bool below_autograd,
                       bool typed) {
  try {
    std::unique_ptr<AutoDispatchBelowAutograd> guard;
    if (below_autograd) guard = std::make_unique<AutoDispatchBelowAutograd>();
    std::int64_t r = 0;
    const c10::optional<at::Tensor> arg =
        x != nullptr ? c10::optional<at::Tensor>(*x) : c10::nullopt;
    if (typed) {
      r = op.typed<std::int64_t(const c10::optional<at::Tensor>&)>().call(arg);
    } else {
      Stack stack{x != nullptr ? c10::IValue(*x) : c10::IValue()};
      op.call_boxed(&stack);
      r = stack.back().toInt();
    }
    return "kernel " + std::to_string(r);
  } catch (const NotImplementedError& e) {
    return "not implemented: " + first_sentence(e.what());
  } catch (const Error&) {
    return "error";
  }
}

/// "not implemented: ..." -> "not implemented"; other outcomes unchanged.
std::string category(const std::string& outcome) { return outcome.substr(0, outcome.find(':')); }

/// Key -> rest of line ("fallthrough registered at kid3:0 [kernel]"), with the debug strings
/// of each library's framework registrations replaced by "<framework>".
std::map<std::string, std::string> parse_table(const std::string& dump) {
  std::map<std::string, std::string> out;
  std::istringstream in(dump);
  std::string line;
  while (std::getline(in, line)) {
    const std::size_t colon = line.find(": ");
    if (colon == std::string::npos) continue;
    std::string rest = line.substr(colon + 2);
    const std::size_t at = rest.find("registered at ");
    const std::size_t bracket = rest.rfind(" [");
    if (at != std::string::npos && bracket != std::string::npos &&
        rest.compare(at, 17, "registered at kid") != 0) {
      rest = rest.substr(0, at) + "<framework>" + rest.substr(bracket);
    }
    out[line.substr(0, colon)] = rest;
  }
  return out;
}

/// Which kernel the computed table says runs: walk the keys a call's set holds, highest
/// priority first, skipping fallthrough entries, ending at Undefined (See Note [Fallthrough]).
std::string predict(const std::map<std::string, std::string>& table, const char* backend,
                    bool below_autograd) {
  std::vector<std::string> keys;
  if (backend != nullptr && !below_autograd) keys.push_back(std::string("Autograd") + backend);
  keys.push_back("ADInplaceOrView");
  keys.push_back("BackendSelect");
  if (backend != nullptr) keys.push_back(backend);
  keys.push_back("Undefined");
  for (const std::string& k : keys) {
    auto it = table.find(k);
    if (it == table.end()) return "not implemented";
    const std::string& rest = it->second;
    const bool fallthrough = rest.rfind("fallthrough ", 0) == 0;
    if (fallthrough && k != "Undefined") continue;
    if (fallthrough) return "error";
    const std::size_t kid = rest.find("registered at kid");
    if (kid == std::string::npos) return "framework kernel";
    return "kernel " + std::to_string(std::stoi(rest.substr(kid + 17)));
  }
  return "not implemented";
}

struct Stats {
  int scenarios = 0;
  int checks = 0;
  int c10_inconsistent_checks = 0;
  int c10_inconsistent_scenarios = 0;
  int mismatches = 0;
  int kernels = 0;                      ///< kernel registrations (including fallthroughs)
  int fallbacks = 0;                    ///< backend fallback registrations
  int drops = 0;                        ///< registrations destroyed mid-scenario
  std::map<std::string, int> outcomes;  ///< "kernel", "not implemented", "error" counts
  std::vector<std::string> reports;
};

// Note [Differential scenarios]
// Each scenario defines a fresh operator kadiff::op_<n>(Tensor? x) -> int on both
// dispatchers, then applies up to 10 random steps: a kernel (or fallthrough) for CPU,
// AutogradCPU, CUDA, AutogradCUDA or one of the alias keys (overwriting what is there), the
// destruction of a random live kernel or fallback (restoring what it overwrote), or a backend
// fallback (kernel or fallthrough) for CPU or CUDA. Kernels are boxed or typed (both sides
// then run their adapters for the other calling convention). After every step it compares,
// for a plain CPU tensor, the same under AutoDispatchBelowAutograd, no tensor argument, and a
// Meta tensor: which kernel runs (ka boxed, ka typed, c10; for errors, the class and the first
// sentence of the message), the computed-table lines for Undefined, CPU, AutogradCPU, CUDA,
// AutogradCUDA, Meta and AutogradMeta, and the registration state (dumpState, up to the
// schema c10 infers from typed kernels).
//
// libtorch 1.13 is itself inconsistent in some orders (registering CompositeExplicitAutograd
// after CompositeImplicitAutograd leaves a stale math kernel in AutogradCPU; ANCHORS.md).
// When c10's own checkInvariants() fails after a step, its runtime table is not its computed
// table, and ka (whose runtime table always is its computed table) is compared against the
// kernel c10's *computed* table selects instead of against c10's call.
void run_scenario(int n, std::mt19937& rng, const at::Tensor& x, const at::Tensor& meta,
                  Stats& stats) {
  static const std::vector<C10Factory> c10_k =
      c10_factories(std::make_integer_sequence<int, kMaxKernels>{});
  static const std::vector<KernelFunction::BoxedFn> ka_k =
      ka_kernels(std::make_integer_sequence<int, kMaxKernels>{});
  static const std::vector<C10Factory> c10_typed_k =
      c10_typed_factories(std::make_integer_sequence<int, kMaxKernels>{});
  static const std::vector<TypedFn> ka_typed_k =
      ka_typed_kernels(std::make_integer_sequence<int, kMaxKernels>{});
  const std::vector<DispatchKey> impl_keys = {DispatchKey::CPU,
                                              DispatchKey::AutogradCPU,
                                              DispatchKey::CUDA,
                                              DispatchKey::AutogradCUDA,
                                              DispatchKey::Autograd,
                                              DispatchKey::CompositeImplicitAutograd,
                                              DispatchKey::CompositeExplicitAutograd,
                                              DispatchKey::CompositeExplicitAutogradNonFunctional};
  const std::vector<DispatchKey> fallback_keys = {DispatchKey::CPU, DispatchKey::CUDA};
  const std::string name = "op_" + std::to_string(n);
  const std::string qualified = "kadiff::" + name;
  auto pick = [&](int bound) { return std::uniform_int_distribution<int>(0, bound - 1)(rng); };

  std::vector<Registration> live;  // kernels
  std::vector<Registration> fallbacks;
  std::map<DispatchKey, bool> fallback_taken;
  torch::Library c10_def(torch::Library::FRAGMENT, "kadiff", c10::nullopt, "kdef", 0);
  c10_def.def((name + "(Tensor? x) -> int").c_str());
  Library ka_def(Library::Kind::kFragment, "kadiff", std::nullopt, "registered at kdef:0");
  ka_def.def(name + "(Tensor? x) -> int");
  const c10::OperatorHandle c10_op =
      c10::Dispatcher::singleton().findSchemaOrThrow(qualified.c_str(), "");
  const OperatorHandle ka_op = Dispatcher::singleton().find_op_or_throw(qualified);

  int next_id = 0;
  std::string history;
  bool inconsistent_scenario = false;
  const int steps = 1 + pick(10);
  for (int step = 0; step < steps; ++step) {
    const int action = pick(100);
    // 45%: a kernel; 20%: a fallback (when a key is free); 35%: drop a registration.
    const bool can_drop = live.size() + fallbacks.size() > 0;
    if (action < 65 || !can_drop) {
      if (action >= 45 && action < 65 && fallback_taken.size() < fallback_keys.size()) {
        // A backend fallback for a key not yet taken in this scenario.
        DispatchKey k = fallback_keys[static_cast<std::size_t>(pick(2))];
        if (fallback_taken.count(k) != 0)
          k = k == DispatchKey::CPU ? DispatchKey::CUDA : DispatchKey::CPU;
        fallback_taken[k] = true;
        const int id = next_id++;
        const bool fallthrough = pick(100) < 30;
        Registration r;
        r.c10_lib = std::make_unique<torch::Library>(torch::Library::IMPL, "_", to_c10(k),
                                                     kernel_file(id), 0);
        r.ka_lib = std::make_unique<Library>(Library::Kind::kImpl, "_", k, kernel_debug(id));
        if (fallthrough) {
          r.c10_lib->fallback(torch::CppFunction::makeFallthrough());
          r.ka_lib->fallback(KernelFunction::fallthrough(kernel_debug(id)));
        } else {
          r.c10_lib->fallback(c10_k[static_cast<std::size_t>(id)]());
          r.ka_lib->fallback(
              KernelFunction::from_boxed(ka_k[static_cast<std::size_t>(id)], kernel_debug(id)));
        }
        r.fallback_key = k;
        r.what = "fallback " + to_string(k) + (fallthrough ? " fallthrough" : "") + " kid" +
                 std::to_string(id);
        history += "  step " + std::to_string(step) + ": " + r.what + "\n";
        fallbacks.push_back(std::move(r));
        ++stats.fallbacks;
      } else {
        const DispatchKey k =
            impl_keys[static_cast<std::size_t>(pick(static_cast<int>(impl_keys.size())))];
        const int id = next_id++;
        const int kind = pick(100);
        const bool fallthrough = kind < 15;
        const bool typed = kind >= 60;
        Registration r;
        r.c10_lib = std::make_unique<torch::Library>(torch::Library::IMPL, "kadiff", to_c10(k),
                                                     kernel_file(id), 0);
        r.ka_lib = std::make_unique<Library>(Library::Kind::kImpl, "kadiff", k, kernel_debug(id));
        if (fallthrough) {
          r.c10_lib->impl(name.c_str(), torch::CppFunction::makeFallthrough());
          r.ka_lib->impl(name, KernelFunction::fallthrough(kernel_debug(id)));
        } else if (typed) {
          r.c10_lib->impl(name.c_str(), c10_typed_k[static_cast<std::size_t>(id)]());
          r.ka_lib->impl(name, KernelFunction::from_unboxed(
                                   ka_typed_k[static_cast<std::size_t>(id)], kernel_debug(id)));
        } else {
          r.c10_lib->impl(name.c_str(), c10_k[static_cast<std::size_t>(id)]());
          r.ka_lib->impl(name, KernelFunction::from_boxed(ka_k[static_cast<std::size_t>(id)],
                                                          kernel_debug(id)));
        }
        r.what = "impl " + to_string(k) +
                 (fallthrough ? " fallthrough"
                  : typed     ? " typed"
                              : "") +
                 " kid" + std::to_string(id);
        history += "  step " + std::to_string(step) + ": " + r.what + "\n";
        live.push_back(std::move(r));
        ++stats.kernels;
      }
    } else {
      // Destroy a random live registration (kernel or fallback), on both sides.
      const auto victim =
          static_cast<std::size_t>(pick(static_cast<int>(live.size() + fallbacks.size())));
      std::vector<Registration>& from = victim < live.size() ? live : fallbacks;
      const std::size_t at = victim < live.size() ? victim : victim - live.size();
      history += "  step " + std::to_string(step) + ": drop " + from[at].what + "\n";
      if (from[at].fallback_key) fallback_taken.erase(*from[at].fallback_key);
      from.erase(from.begin() + static_cast<std::ptrdiff_t>(at));
      ++stats.drops;
    }
    // Compare.
    bool c10_consistent = true;
    try {
      c10_op.checkInvariants();
    } catch (const c10::Error&) {
      c10_consistent = false;
      inconsistent_scenario = true;
      ++stats.c10_inconsistent_checks;
    }
    const auto c10_table = parse_table(c10_op.dumpComputedTable());
    const auto ka_table = parse_table(ka_op.dump_computed_table());
    std::ostringstream diff;
    for (const char* key :
         {"Undefined", "CPU", "AutogradCPU", "CUDA", "AutogradCUDA", "Meta", "AutogradMeta"}) {
      auto c = c10_table.find(key);
      auto k = ka_table.find(key);
      const std::string cl = c == c10_table.end() ? "(none)" : c->second;
      const std::string kl = k == ka_table.end() ? "(none)" : k->second;
      if (cl != kl) diff << "    table " << key << ": c10 '" << cl << "' ka '" << kl << "'\n";
    }
    for (int mode = 0; mode < 4; ++mode) {
      const at::Tensor* tensor = mode == 2 ? nullptr : mode == 3 ? &meta : &x;
      const char* backend = mode == 2 ? nullptr : mode == 3 ? "Meta" : "CPU";
      const bool below = mode == 1;
      const char* mode_name = mode == 0   ? "cpu tensor"
                              : mode == 1 ? "below autograd"
                              : mode == 2 ? "no tensor"
                                          : "meta tensor";
      const std::string ka_boxed = outcome_ka(ka_op, tensor, below, false);
      const std::string ka_typed = outcome_ka(ka_op, tensor, below, true);
      // Full outcomes (with the error's first sentence) against c10's call; only the
      // category against a prediction from c10's computed table.
      const std::string expected =
          c10_consistent ? outcome_c10(c10_op, tensor, below) : predict(c10_table, backend, below);
      const std::string got = c10_consistent ? ka_boxed : category(ka_boxed);
      const std::string predicted = predict(ka_table, backend, below);
      ++stats.outcomes[category(expected).substr(0, 6) == "kernel" ? "kernel" : category(expected)];
      if (got != expected || ka_typed != ka_boxed || predicted != category(expected)) {
        diff << "    " << mode_name << ": expected ("
             << (c10_consistent ? "c10 call" : "c10 computed table") << ") '" << expected
             << "', ka boxed '" << ka_boxed << "', ka typed '" << ka_typed
             << "', ka table predicts '" << predicted << "'\n";
      }
    }
    // The registration state (dumpState) must print the same lines.
    if (normalise_state(c10_op.dumpState()) != normalise_state(ka_op.dump_state())) {
      diff << "    dump_state differs:\n--- c10\n"
           << c10_op.dumpState() << "--- ka\n"
           << ka_op.dump_state();
    }
    ++stats.checks;
    ka_op.check_invariants();
    if (!diff.str().empty()) {
      ++stats.mismatches;
      if (stats.reports.size() < 10) {
        stats.reports.push_back("scenario " + std::to_string(n) + " after step " +
                                std::to_string(step) + ":\n" + history + diff.str() +
                                "  c10 computed table:\n" + c10_op.dumpComputedTable() +
                                "  ka computed table:\n" + ka_op.dump_computed_table());
      }
    }
  }
  if (inconsistent_scenario) ++stats.c10_inconsistent_scenarios;
  ++stats.scenarios;
  // Newest first, as a process exit would.
  while (!live.empty()) live.pop_back();
  while (!fallbacks.empty()) fallbacks.pop_back();
}

TEST(C10DifferentialTest, RandomRegistrationScenarios) {
  QuietWarnings quiet;
  WarningHandlerGuard guard(&quiet);
  const at::Tensor x = at::zeros({1});
  const at::Tensor meta = at::zeros({1}, at::TensorOptions().device(at::kMeta));
  std::mt19937 rng(kSeed);
  Stats stats;
  for (int n = 0; n < kScenarios; ++n) run_scenario(n, rng, x, meta, stats);
  std::printf(
      "differential: %d scenarios, %d checks, %d mismatches; c10 1.13 inconsistent in %d "
      "scenarios (%d checks), compared against its computed table there\n",
      stats.scenarios, stats.checks, stats.mismatches, stats.c10_inconsistent_scenarios,
      stats.c10_inconsistent_checks);
  std::printf("differential: steps: %d kernels, %d fallbacks, %d deregistrations\n", stats.kernels,
              stats.fallbacks, stats.drops);
  for (const auto& [outcome, count] : stats.outcomes) {
    std::printf("differential: outcome '%s' expected %d times\n", outcome.c_str(), count);
  }
  for (const std::string& r : stats.reports) ADD_FAILURE() << r;
  EXPECT_EQ(stats.mismatches, 0);
  EXPECT_EQ(stats.scenarios, kScenarios);
}

}  // namespace
}  // namespace ka::dispatch
