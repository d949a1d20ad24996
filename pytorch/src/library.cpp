// libka_torch's entry points: torch.ops.ka, the aten override that enable() installs and
// disable() removes, and what happens at load (KA_OVERRIDE_ATEN, KA_TUNED_TABLE).
#include "call_log.hpp"
#include "served_ops.hpp"

#include <ka/core/error.hpp>
#include <ka/runtime/runtime.hpp>
#include <ka/pytorch/ka_torch.hpp>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

namespace ka::pytorch {
namespace {

// Note [Override by registration]
// enable() registers ka's kernels for aten's operators at the CPU dispatch key in a
// torch::Library of its own; c10 keeps every registration of a key in a list and dispatches
// to the newest, so ka's kernels take the calls. disable() destroys that Library, which
// deregisters exactly what it registered: libtorch's kernels are again the newest, and each
// operator's dispatch table is as before (the tests compare _dispatch_dump). Only backend
// (CPU) kernels are replaced, never the Autograd ones, so autograd records the same graph
// and its backward formulas call the (overridden) aten operators as they would anyway. The
// one exception, layer_norm (a composite without a CPU kernel), has its own Note
// [Overriding a composite operator] in served_ops.cpp.
struct Override {
  std::mutex mutex;
  std::unique_ptr<::torch::Library> aten_cpu;
  std::unique_ptr<::torch::Library> aten_autograd_cpu;
};
Override& override_state() {
  static Override* state = new Override();  // never destroyed: see Note [Unload order]
  return *state;
}

// c10 warns on every registration that replaces a kernel; that is enable()'s purpose, so
// those warnings are dropped and every other one is passed on.
class DropOverrideWarnings : public c10::WarningHandler {
 public:
  DropOverrideWarnings() : next_(c10::Warning::get_warning_handler()) {}
  void process(const c10::SourceLocation& where, const std::string& msg,
               bool verbatim) override {
    if (msg.find("Overriding a previously registered kernel") != std::string::npos) return;
    next_->process(where, msg, verbatim);
  }

 private:
  c10::WarningHandler* next_;
};

// ---- the control operators behind the Python package ---------------------------------------

void op_enable() { enable(); }
void op_disable() { disable(); }
bool op_enabled() { return enabled(); }
std::int64_t op_load_table(std::string path) { return load_table(path); }
std::string op_explain() { return explain_json(); }
std::string op_report() { return report_json(); }
void op_reset() { reset(); }

}  // namespace

void enable() {
  detail::runtime_with_table();
  Override& o = override_state();
  std::lock_guard<std::mutex> lock(o.mutex);
  if (o.aten_cpu) return;
  DropOverrideWarnings drop;
  c10::Warning::WarningHandlerGuard guard(&drop);
  auto lib = std::make_unique<::torch::Library>(::torch::Library::IMPL, "aten",
                                                c10::DispatchKey::CPU, __FILE__, __LINE__);
  auto autograd = std::make_unique<::torch::Library>(
      ::torch::Library::IMPL, "aten", c10::DispatchKey::AutogradCPU, __FILE__, __LINE__);
  detail::impl_served_ops(*lib);
  detail::impl_composite_overrides(*lib, *autograd);
  o.aten_cpu = std::move(lib);
  o.aten_autograd_cpu = std::move(autograd);
}

void disable() {
  Override& o = override_state();
  std::lock_guard<std::mutex> lock(o.mutex);
  o.aten_autograd_cpu.reset();
  o.aten_cpu.reset();
}

bool enabled() {
  Override& o = override_state();
  std::lock_guard<std::mutex> lock(o.mutex);
  return o.aten_cpu != nullptr;
}

std::int64_t load_table(const std::string& path) {
  runtime::Runtime& rt = detail::runtime_with_table();
  rt.load_table(path);
  return static_cast<std::int64_t>(rt.extractor().table()->size());
}

std::int64_t use_compiled_table(const db::CompiledRecommendation* rows, std::size_t count,
                                std::string_view device_json) {
  const runtime::Runtime& rt = detail::runtime_with_table();
  return static_cast<std::int64_t>(rt.use_compiled_table(rows, count, device_json));
}

std::string explain_json() { return detail::explain_json(); }
std::string report_json() { return detail::report_json(); }
void reset() { detail::reset_log(); }

}  // namespace ka::pytorch

TORCH_LIBRARY(ka, m) {
  ka::pytorch::detail::def_served_ops(m);
  m.def("_enable() -> ()", &ka::pytorch::op_enable);
  m.def("_disable() -> ()", &ka::pytorch::op_disable);
  m.def("_enabled() -> bool", &ka::pytorch::op_enabled);
  m.def("_load_table(str path) -> int", &ka::pytorch::op_load_table);
  m.def("_explain() -> str", &ka::pytorch::op_explain);
  m.def("_report() -> str", &ka::pytorch::op_report);
  m.def("_reset() -> ()", &ka::pytorch::op_reset);
}

TORCH_LIBRARY_IMPL(ka, CPU, m) {
  ka::pytorch::detail::impl_served_ops(m);
  ka::pytorch::detail::impl_ka_only_ops(m);
}

namespace {
// The two IMPL libraries of impl_autograd_not_implemented (TORCH_LIBRARY_IMPL gives one key
// per block; both must list the same operators).
::torch::Library& inplace_or_view_library() {
  static auto* lib = new ::torch::Library(::torch::Library::IMPL, "ka",
                                          c10::DispatchKey::ADInplaceOrView, __FILE__, __LINE__);
  return *lib;
}
}  // namespace

TORCH_LIBRARY_IMPL(ka, Autograd, m) {
  ka::pytorch::detail::impl_autograd_not_implemented(m, inplace_or_view_library());
}

namespace {

// Note [Unload order]
// KA_OVERRIDE_ATEN=1 enables ka when the library loads, for programs that cannot call
// enable(). A table that does not load is reported and leaves aten as it is: a static
// initializer must not throw. The override state is never destroyed, so no registration
// is torn down after libtorch's dispatcher during exit.
const bool kEnabledAtLoad = [] {
  const char* flag = std::getenv("KA_OVERRIDE_ATEN");
  if (flag == nullptr || std::strcmp(flag, "1") != 0) return false;
  try {
    ka::pytorch::enable();
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "libka_torch: KA_OVERRIDE_ATEN=1 but ka was not enabled: %s\n",
                 e.what());
    return false;
  }
}();

}  // namespace
