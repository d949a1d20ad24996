#include <c10/core/DispatchKeySet.h>

#include <array>
#include <ka/core/error.hpp>
#include <ka/core/logging.hpp>
#include <ka/dispatch/dispatcher.hpp>
#include <list>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>

namespace ka::dispatch {
namespace detail {

// ---- c10 key set translation (see Note [c10 key sets]) ----

namespace {

struct C10Translation {
  std::uint64_t relevant = 0;               ///< c10 bits ka models.
  std::array<std::uint64_t, 64> ka_bits{};  ///< ka bits per c10 bit.
};

C10Translation make_c10_translation() {
  C10Translation t;
  auto add = [&](std::uint64_t c10_bits, DispatchKeySet ka) {
    for (int i = 0; i < 64; ++i) {
      if ((c10_bits >> i) & 1U) {
        t.relevant |= std::uint64_t{1} << i;
        t.ka_bits[static_cast<std::size_t>(i)] |= ka.raw_repr();
      }
    }
  };
  auto backend = [](c10::BackendComponent b) { return c10::DispatchKeySet(b).raw_repr(); };
  auto key = [](c10::DispatchKey k) { return c10::DispatchKeySet(k).raw_repr(); };
  add(backend(c10::BackendComponent::CPUBit), DispatchKeySet(BackendComponent::CPUBit));
  add(backend(c10::BackendComponent::CUDABit), DispatchKeySet(BackendComponent::CUDABit));
  add(backend(c10::BackendComponent::MetaBit), DispatchKeySet(BackendComponent::MetaBit));
  add(backend(c10::BackendComponent::PrivateUse1Bit),
      DispatchKeySet(BackendComponent::PrivateUse1Bit));
  add(key(c10::DispatchKey::Dense), DispatchKeySet(DispatchKey::Dense));
  add(key(c10::DispatchKey::BackendSelect), DispatchKeySet(DispatchKey::BackendSelect));
  add(key(c10::DispatchKey::Functionalize), DispatchKeySet(DispatchKey::Functionalize));
  add(key(c10::DispatchKey::ADInplaceOrView), DispatchKeySet(DispatchKey::ADInplaceOrView));
  add(key(c10::DispatchKey::AutogradOther), DispatchKeySet(DispatchKey::AutogradOther));
  add(key(c10::DispatchKey::AutogradFunctionality),
      DispatchKeySet(DispatchKey::AutogradFunctionality));
  add(key(c10::DispatchKey::Tracer), DispatchKeySet(DispatchKey::Tracer));
  add(key(c10::DispatchKey::FuncTorchBatched), DispatchKeySet(DispatchKey::FuncTorchBatched));
  return t;
}

}  // namespace

std::uint64_t translate_c10_key_set(std::uint64_t c10_repr) noexcept {
  static const C10Translation t = make_c10_translation();
  std::uint64_t bits = c10_repr & t.relevant;
  std::uint64_t out = 0;
  while (bits != 0) {
    out |= t.ka_bits[static_cast<std::size_t>(__builtin_ctzll(bits))];
    bits &= bits - 1;
  }
  return out;
}

std::uint64_t c10_key_set_of_ivalue_slow(const c10::IValue& v) {
  std::uint64_t r = 0;
  if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList().vec()) r |= t.key_set().raw_repr();
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor()) r |= e.toTensor().key_set().raw_repr();
    }
  }
  return r;
}

// ---- Cold operator state ----

struct OperatorCold {
  std::string name;  ///< "ns::op" or "ns::op.overload"
  std::string schema;
  std::string schema_debug;
  std::uint32_t num_args = 0;
  std::uint64_t dispatch_arg_bits = 0;
  bool defined = false;
  int impl_count = 0;
  /// Per key (runtime and alias), newest first. See Note [Overwrite].
  std::array<std::list<KernelFunction>, kNumDispatchKeys> kernels;
  const void* cpp_signature = nullptr;
  std::string cpp_signature_name;
  std::string cpp_signature_debug;
  int typed_kernel_count = 0;
  bool signature_pinned = false;  ///< Set by a typed() call; see Note [Typed call safety].
  bool stale = false;  ///< Dead operator whose table misses a fallback change (publish_all()).
  /// Every table ever published, current last. See Note [Lock-free calls].
  std::vector<std::unique_ptr<DispatchTable>> tables;
};

void missing_kernel(const OperatorHandle& op, DispatchKeySet ks, Stack* /*stack*/) {
  op.report_error(ks.highest_priority_key());
}

void fallthrough_kernel(const OperatorHandle& op, DispatchKeySet ks, Stack* /*stack*/) {
  KA_THROW(InternalError, "fallthrough kernel of '", op.name(), "' was run for ", ks.to_string(),
           ": a fallthrough registered for an operator's Undefined entry cannot be skipped; "
           "register a real kernel or a backend fallback instead");
}

}  // namespace detail

// ---- KernelFunction ----

KernelFunction KernelFunction::from_boxed(BoxedFn fn, std::string debug) {
  KA_CHECK(fn != nullptr, "KernelFunction::from_boxed: null function");
  KernelFunction k;
  k.hot_.boxed = fn;
  k.debug_ = std::move(debug);
  return k;
}

KernelFunction KernelFunction::fallthrough(std::string debug) {
  KernelFunction k;
  k.hot_.boxed = &detail::fallthrough_kernel;
  k.hot_.fallthrough = true;
  k.debug_ = std::move(debug);
  return k;
}

// ---- RegistrationHandle ----

RegistrationHandle& RegistrationHandle::operator=(RegistrationHandle&& o) noexcept {
  if (this != &o) {
    reset();
    undo_ = std::move(o.undo_);
    o.undo_ = nullptr;
  }
  return *this;
}

void RegistrationHandle::reset() noexcept {
  if (undo_) {
    auto undo = std::move(undo_);
    undo_ = nullptr;
    undo();
  }
}

// ---- Schema ----

namespace {

struct ParsedSchema {
  std::string name;  ///< with overload
  std::uint32_t num_args = 0;
  std::uint64_t dispatch_arg_bits = 0;
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

ParsedSchema parse_schema(std::string_view text) {
  const std::string_view s = trim(text);
  const std::size_t open = s.find('(');
  KA_CHECK(open != std::string_view::npos, "malformed schema '", text, "': expected '('");
  ParsedSchema out;
  out.name = std::string(trim(s.substr(0, open)));
  KA_CHECK(out.name.find("::") != std::string::npos && out.name.find("::") > 0,
           "malformed schema '", text, "': the operator name needs a namespace ('ns::name')");
  int depth = 0;
  std::size_t close = std::string_view::npos;
  std::vector<std::string_view> args;
  std::size_t start = open + 1;
  for (std::size_t i = open; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '(' || c == '[') {
      ++depth;
    } else if (c == ')' || c == ']') {
      --depth;
      if (depth == 0) {
        close = i;
        break;
      }
    } else if (c == ',' && depth == 1) {
      args.push_back(trim(s.substr(start, i - start)));
      start = i + 1;
    }
  }
  KA_CHECK(close != std::string_view::npos, "malformed schema '", text, "': unbalanced '('");
  args.push_back(trim(s.substr(start, close - start)));
  KA_CHECK(trim(s.substr(close + 1)).substr(0, 2) == "->", "malformed schema '", text,
           "': expected '-> <returns>' after the arguments");
  for (std::string_view a : args) {
    if (a.empty() || a == "*") continue;
    KA_CHECK(out.num_args < 64, "schema '", text, "' has more than 64 arguments");
    if (a.substr(0, 6) == "Tensor") {
      out.dispatch_arg_bits |= std::uint64_t{1} << out.num_args;
    }
    ++out.num_args;
  }
  return out;
}

struct Computed {
  const KernelFunction* kernel = nullptr;  ///< nullptr: missing
  const char* provenance = "missing";
};

}  // namespace

// ---- Dispatcher state ----

struct Dispatcher::Impl {
  struct OpSlot {
    detail::OperatorEntry entry;
    detail::OperatorCold cold;
  };

  mutable std::mutex mutex;
  std::map<std::string, std::unique_ptr<OpSlot>, std::less<>> ops;
  /// Backend fallbacks per runtime entry (at most one each).
  std::array<std::list<KernelFunction>, kNumRuntimeEntries> fallbacks;
  std::map<std::string, std::string, std::less<>> libraries;  ///< ns -> debug of its kDef block
  bool warned_overwrite = false;

  OpSlot& slot(const std::string& name) {
    auto it = ops.find(name);
    if (it != ops.end()) return *it->second;
    auto s = std::make_unique<OpSlot>();
    s->cold.name = name;
    s->entry.cold = &s->cold;
    OpSlot& ref = *s;
    ops.emplace(name, std::move(s));
    publish(ref);
    return ref;
  }

  static const KernelFunction* direct(const detail::OperatorCold& op, DispatchKey k) {
    const auto& l = op.kernels[static_cast<std::size_t>(k)];
    return l.empty() ? nullptr : &l.front();
  }
  static bool has_kernel_for_any(const detail::OperatorCold& op, DispatchKeySet ks) {
    for (int i = 0; i < kNumDispatchKeys; ++i) {
      const auto k = static_cast<DispatchKey>(i);
      if (!is_alias_key(k) && !op.kernels[static_cast<std::size_t>(i)].empty() && ks.has(k))
        return true;
    }
    return false;
  }

  // Note [Table computation]
  // The precedence is c10's (OperatorEntry::computeDispatchTableEntryWithDebug):
  //  1. a kernel registered to the key itself                          [kernel]
  //  2. CompositeExplicitAutogradNonFunctional, then CompositeExplicitAutograd, for the
  //     backend keys and Undefined                                    [default backend kernel]
  //  3. CompositeImplicitAutograd for backend keys, autograd keys and Undefined, except for
  //     an autograd key whose backend (or CompositeExplicitAutograd) has a kernel [math kernel]
  //  4. Autograd for the autograd keys                                 [autograd kernel]
  //  5. the backend fallback                                           [backend fallback]
  //  6. nothing                                                        [missing]
  // Unlike c10, which refreshes only the entries it thinks a registration affects (and so
  // leaves a stale math kernel in AutogradCPU when CompositeExplicitAutograd is registered
  // after CompositeImplicitAutograd), ka recomputes every entry of the operator on each
  // change: there are only kNumRuntimeEntries of them, and registration is cold.
  Computed compute(const detail::OperatorCold& op, DispatchKey k) const {
    if (const KernelFunction* f = direct(op, k)) return {f, "kernel"};
    const bool undefined = k == DispatchKey::Undefined;
    if (undefined || is_included_in_alias(k, DispatchKey::CompositeExplicitAutogradNonFunctional)) {
      if (const KernelFunction* f =
              direct(op, DispatchKey::CompositeExplicitAutogradNonFunctional)) {
        return {f, "default backend kernel"};
      }
    }
    if (undefined || is_included_in_alias(k, DispatchKey::CompositeExplicitAutograd)) {
      if (const KernelFunction* f = direct(op, DispatchKey::CompositeExplicitAutograd)) {
        return {f, "default backend kernel"};
      }
    }
    const bool has_backend_kernel = has_kernel_for_any(op, backend_key_set_from_autograd(k)) ||
                                    direct(op, DispatchKey::CompositeExplicitAutograd) != nullptr;
    if (undefined || is_included_in_alias(k, DispatchKey::CompositeImplicitAutograd)) {
      if (const KernelFunction* f = direct(op, DispatchKey::CompositeImplicitAutograd)) {
        if (!has_backend_kernel) return {f, "math kernel"};
      }
    }
    if (is_included_in_alias(k, DispatchKey::Autograd)) {
      if (const KernelFunction* f = direct(op, DispatchKey::Autograd))
        return {f, "autograd kernel"};
    }
    const auto& fb = fallbacks[static_cast<std::size_t>(runtime_entry_index(k))];
    if (!fb.empty()) return {&fb.front(), "backend fallback"};
    return {};
  }

  std::unique_ptr<detail::DispatchTable> build(const detail::OperatorCold& op) const {
    auto t = std::make_unique<detail::DispatchTable>();
    t->num_args = op.num_args;
    t->dispatch_arg_bits = op.dispatch_arg_bits;
    t->non_fallthrough.fill(~std::uint64_t{0});
    for (int i = 0; i < kNumRuntimeEntries; ++i) {
      const DispatchKey k = runtime_key_of_entry(i);
      const Computed c = compute(op, k);
      detail::HotKernel& h = t->entries[static_cast<std::size_t>(i)];
      if (c.kernel != nullptr) {
        h = c.kernel->hot();
        h.origin = c.kernel;
      } else {
        h = detail::HotKernel{};
        h.boxed = &detail::missing_kernel;
      }
      // See Note [Fallthrough].
      if (h.fallthrough && k != DispatchKey::Undefined) {
        const std::uint64_t f = DispatchKeySet(to_functionality_key(k)).raw_repr();
        const BackendComponent b = to_backend_component(k);
        for (int s = 0; s < kNumBackends; ++s) {
          if (b == BackendComponent::InvalidBit || static_cast<int>(b) - 1 == s) {
            t->non_fallthrough[static_cast<std::size_t>(s)] &= ~f;
          }
        }
      }
    }
    return t;
  }

  static bool same_table(const detail::DispatchTable& a, const detail::DispatchTable& b) {
    if (a.non_fallthrough != b.non_fallthrough || a.num_args != b.num_args ||
        a.dispatch_arg_bits != b.dispatch_arg_bits) {
      return false;
    }
    for (std::size_t i = 0; i < a.entries.size(); ++i) {
      const detail::HotKernel& x = a.entries[i];
      const detail::HotKernel& y = b.entries[i];
      if (x.unboxed != y.unboxed || x.boxed != y.boxed || x.unboxing != y.unboxing ||
          x.takes_key_set != y.takes_key_set || x.fallthrough != y.fallthrough ||
          x.origin != y.origin) {
        return false;
      }
    }
    return true;
  }

  static bool alive(const detail::OperatorCold& op) { return op.defined || op.impl_count > 0; }

  /// Publishes the operator's computed table, unless it equals the published one.
  void publish(OpSlot& s) const {
    auto t = build(s.cold);
    s.cold.stale = false;
    const detail::DispatchTable* current = s.entry.table.load(std::memory_order_relaxed);
    if (current != nullptr && same_table(*current, *t)) return;
    s.entry.table.store(t.get(), std::memory_order_release);
    s.cold.tables.push_back(std::move(t));
  }
  /// After a fallback change. Operators with no def and no kernel are only marked stale (they
  /// cannot be found, and are republished when registered again); this keeps a process that
  /// creates many short-lived operators from retiring a table per dead operator per change.
  void publish_all() {
    for (auto& [name, s] : ops) {
      if (alive(s->cold)) {
        publish(*s);
      } else {
        s->cold.stale = true;
      }
    }
  }

  static std::string list_all_dispatch_keys(const detail::DispatchTable& t) {
    std::ostringstream out;
    out << "[";
    bool first = true;
    for (DispatchKey k : DispatchKeySet::full().keys()) {
      const auto& h = t.entries[static_cast<std::size_t>(runtime_entry_index(k))];
      if (h.boxed == &detail::missing_kernel) continue;
      if (!first) out << ", ";
      out << to_string(k);
      first = false;
    }
    out << "]";
    return out.str();
  }

  std::string dump_computed_table(const detail::OperatorCold& op) const {
    std::ostringstream out;
    std::vector<DispatchKey> keys{DispatchKey::Undefined};
    for (DispatchKey k : DispatchKeySet::full().keys()) keys.push_back(k);
    for (DispatchKey k : keys) {
      const Computed c = compute(op, k);
      if (c.kernel == nullptr) continue;
      out << to_string(k) << ": " << (c.kernel->is_fallthrough() ? "fallthrough " : "")
          << c.kernel->debug() << " [" << c.provenance << "]\n";
    }
    return out.str();
  }
};

// Note [Fallthrough]
// A fallthrough kernel never runs: when an entry of the table is a fallthrough, its
// functionality is cleared from the operator's non-fallthrough mask, so the call's key set
// loses it and the next key wins. For a per-backend key (AutogradCPU) only that backend's
// mask changes; the mask is chosen by the arguments' highest backend, like c10's
// nonFallthroughKeysPerBackend_.

// Note [Overwrite]
// Kernels registered to the same operator and key form a list, newest first; the newest
// one is used. Deregistering it (destroying its Library) restores the previous one. The
// first overwrite in a process logs PyTorch's warning, once.

namespace {

detail::OperatorCold& cold_of(detail::OperatorEntry* e) { return *e->cold; }

}  // namespace

Dispatcher& Dispatcher::singleton() {
  // Never destroyed: static Libraries deregister during exit and must find it alive.
  static Dispatcher* const dispatcher = new Dispatcher();
  return *dispatcher;
}

Dispatcher::Dispatcher() : impl_(std::make_unique<Impl>()) {
  // PyTorch's framework defaults: these keys fall through unless an operator registers a
  // kernel for them (c10 registers them in BackendSelectFallbackKernel.cpp and
  // VariableFallbackKernel.cpp). As in libtorch 1.13 (the differential test's oracle),
  // AutogradMeta and AutogradPrivateUse1 have none: an operator needs an autograd kernel (or
  // a fallthrough of its own) for Meta and PrivateUse1 tensors.
  const DispatchKey defaults[] = {DispatchKey::BackendSelect, DispatchKey::ADInplaceOrView,
                                  DispatchKey::AutogradOther, DispatchKey::AutogradCPU,
                                  DispatchKey::AutogradCUDA};
  for (DispatchKey k : defaults) {
    impl_->fallbacks[static_cast<std::size_t>(runtime_entry_index(k))].push_front(
        KernelFunction::fallthrough("registered at ka/dispatch framework defaults"));
  }
}

Dispatcher::~Dispatcher() = default;

std::optional<OperatorHandle> Dispatcher::find_op(std::string_view name) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto it = impl_->ops.find(name);
  if (it == impl_->ops.end() || !it->second->cold.defined) return std::nullopt;
  return OperatorHandle(&it->second->entry);
}

OperatorHandle Dispatcher::find_op_or_throw(std::string_view name) const {
  auto op = find_op(name);
  KA_CHECK(op.has_value(), "Could not find schema for ", name);
  return *op;
}

std::vector<std::string> Dispatcher::op_names() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  std::vector<std::string> out;
  for (const auto& [name, s] : impl_->ops) {
    if (s->cold.defined) out.push_back(name);
  }
  return out;
}

RegistrationHandle Dispatcher::register_def(std::string_view schema, std::string debug) {
  const ParsedSchema parsed = parse_schema(schema);
  std::lock_guard<std::mutex> lock(impl_->mutex);
  Impl::OpSlot& s = impl_->slot(parsed.name);
  KA_CHECK(!s.cold.defined, "Tried to register an operator (", trim(schema),
           ") with the same name and overload name multiple times. Each overload's schema "
           "should only be registered with a single call to def(). Duplicate registration: ",
           debug, ". Original registration: ", s.cold.schema_debug);
  s.cold.schema = std::string(trim(schema));
  s.cold.schema_debug = std::move(debug);
  s.cold.num_args = parsed.num_args;
  s.cold.dispatch_arg_bits = parsed.dispatch_arg_bits;
  s.cold.defined = true;
  impl_->publish(s);
  Impl* impl = impl_.get();
  Impl::OpSlot* slot = &s;
  return RegistrationHandle([impl, slot] {
    std::lock_guard<std::mutex> undo_lock(impl->mutex);
    slot->cold.defined = false;
    slot->cold.schema.clear();
    slot->cold.schema_debug.clear();
    slot->cold.num_args = 0;
    slot->cold.dispatch_arg_bits = 0;
    impl->publish(*slot);
  });
}

RegistrationHandle Dispatcher::register_impl(std::string_view op_name,
                                             std::optional<DispatchKey> key,
                                             KernelFunction kernel) {
  const DispatchKey k = key.value_or(DispatchKey::CompositeImplicitAutograd);
  KA_CHECK(is_runtime_key(k) || is_alias_key(k), "cannot register a kernel for dispatch key ",
           to_string(k), " (use a runtime key such as CPU or an alias key)");
  KA_CHECK(kernel.is_valid(), "cannot register an empty KernelFunction for ", op_name);
  const std::string name(trim(op_name));
  std::lock_guard<std::mutex> lock(impl_->mutex);
  Impl::OpSlot& s = impl_->slot(name);
  detail::OperatorCold& op = s.cold;
  if (kernel.signature() != nullptr) {
    if (op.cpp_signature != nullptr && op.cpp_signature != kernel.signature()) {
      KA_THROW(ValueError,
               "Mismatch in kernel C++ signatures\n  operator: ", op.defined ? op.schema : op.name,
               "\n    ", op.defined ? op.schema_debug : std::string("no debug info"),
               "\n  kernel 1: ", op.cpp_signature_name, "\n    ", op.cpp_signature_debug,
               "\n  kernel 2: ", kernel.signature_name(), "\n    dispatch key: ", to_string(k),
               "\n    ", kernel.debug(), "\n");
    }
    if (op.cpp_signature == nullptr) {
      op.cpp_signature = kernel.signature();
      op.cpp_signature_name = kernel.signature_name();
      op.cpp_signature_debug = kernel.debug();
    }
    ++op.typed_kernel_count;
  }
  auto& list = op.kernels[static_cast<std::size_t>(k)];
  if (!list.empty() && !impl_->warned_overwrite) {
    impl_->warned_overwrite = true;
    ka::log().warn(
        "Overriding a previously registered kernel for the same operator and the same "
        "dispatch key\n  operator: {}\n    {}\n  dispatch key: {}\n  previous kernel: {}\n"
        "       new kernel: {}",
        op.defined ? op.schema : op.name,
        op.defined ? op.schema_debug : std::string("no debug info"), to_string(k),
        list.front().debug(), kernel.debug());
  }
  const bool typed = kernel.signature() != nullptr;
  list.push_front(std::move(kernel));
  const auto it = list.begin();
  ++op.impl_count;
  impl_->publish(s);
  Impl* impl = impl_.get();
  Impl::OpSlot* slot = &s;
  return RegistrationHandle([impl, slot, k, it, typed] {
    std::lock_guard<std::mutex> undo_lock(impl->mutex);
    detail::OperatorCold& c = slot->cold;
    c.kernels[static_cast<std::size_t>(k)].erase(it);
    --c.impl_count;
    if (typed && --c.typed_kernel_count == 0 && !c.signature_pinned) {
      c.cpp_signature = nullptr;
      c.cpp_signature_name.clear();
      c.cpp_signature_debug.clear();
    }
    impl->publish(*slot);
  });
}

RegistrationHandle Dispatcher::register_fallback(DispatchKey key, KernelFunction kernel) {
  const int idx = runtime_entry_index(key);
  KA_CHECK(idx >= 0, "cannot register a backend fallback for dispatch key ", to_string(key),
           " (fallbacks take runtime keys such as CPU or AutogradCPU)");
  KA_CHECK(kernel.is_valid() && kernel.signature() == nullptr,
           "a backend fallback must be a boxed or fallthrough kernel (it serves every "
           "operator): ",
           kernel.debug());
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto& list = impl_->fallbacks[static_cast<std::size_t>(idx)];
  KA_CHECK(list.empty(), "Tried to register multiple backend fallbacks for the same dispatch key ",
           to_string(key), "; previous registration ", list.empty() ? "" : list.front().debug(),
           ", new registration ", kernel.debug());
  list.push_front(std::move(kernel));
  impl_->publish_all();
  Impl* impl = impl_.get();
  return RegistrationHandle([impl, idx] {
    std::lock_guard<std::mutex> undo_lock(impl->mutex);
    impl->fallbacks[static_cast<std::size_t>(idx)].clear();
    impl->publish_all();
  });
}

RegistrationHandle Dispatcher::register_library(const std::string& ns, std::string debug) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto it = impl_->libraries.find(ns);
  KA_CHECK(it == impl_->libraries.end(),
           "Only a single KA_LIBRARY can be used to register the namespace ", ns,
           "; please put all of your definitions in a single KA_LIBRARY block.  If you were "
           "trying to specify implementations, consider using KA_LIBRARY_IMPL (which can be "
           "duplicated).  If you really intended to define operators for a single namespace in "
           "a distributed way, you can use KA_LIBRARY_FRAGMENT to explicitly indicate this.  "
           "Previous registration of KA_LIBRARY was ",
           it == impl_->libraries.end() ? std::string() : it->second, "; latest registration was ",
           debug);
  impl_->libraries.emplace(ns, std::move(debug));
  Impl* impl = impl_.get();
  return RegistrationHandle([impl, ns] {
    std::lock_guard<std::mutex> undo_lock(impl->mutex);
    impl->libraries.erase(ns);
  });
}

void Dispatcher::check_invariants() const {
  std::vector<OperatorHandle> handles;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    for (auto& [name, s] : impl_->ops) handles.push_back(OperatorHandle(&s->entry));
  }
  for (const OperatorHandle& h : handles) h.check_invariants();
}

// ---- OperatorHandle ----

const std::string& OperatorHandle::name() const noexcept { return cold_of(entry_).name; }
const std::string& OperatorHandle::schema() const noexcept { return cold_of(entry_).schema; }

void OperatorHandle::assert_signature(const void* tag, const char* name) const {
  Dispatcher::Impl& impl = *Dispatcher::singleton().impl_;
  std::lock_guard<std::mutex> lock(impl.mutex);
  detail::OperatorCold& op = cold_of(entry_);
  if (op.cpp_signature == nullptr) {
    op.cpp_signature = tag;
    op.cpp_signature_name = name;
    op.cpp_signature_debug = "first typed() call";
    op.signature_pinned = true;
    return;
  }
  op.signature_pinned = true;
  KA_CHECK(op.cpp_signature == tag, "Tried to access or call an operator with a wrong signature.\n",
           "  operator: ", op.defined ? op.schema : op.name, "\n    ", op.schema_debug,
           "\n  correct signature:  ", op.cpp_signature_name, "\n    ", op.cpp_signature_debug,
           "\n  accessed/called as: ", name,
           "\nThis likely happened in a call to OperatorHandle::typed<Return (Args...)>(). "
           "Please make sure that the function signature matches the signature in the operator "
           "registration call.");
}

std::string OperatorHandle::dump_state() const {
  Dispatcher::Impl& impl = *Dispatcher::singleton().impl_;
  std::lock_guard<std::mutex> lock(impl.mutex);
  const detail::OperatorCold& op = cold_of(entry_);
  std::ostringstream out;
  out << "name: " << op.name << "\n";
  if (op.defined) {
    out << "schema: " << op.schema << "\n";
    out << "debug: " << op.schema_debug << "\n";
    out << "alias analysis kind: FROM_SCHEMA\n";
  } else {
    out << "schema: (none)\n";
  }
  for (int i = 0; i < kNumDispatchKeys; ++i) {
    const auto k = static_cast<DispatchKey>(i);
    int n = 0;
    for (const KernelFunction& kf : op.kernels[static_cast<std::size_t>(i)]) {
      out << to_string(k) << (is_alias_key(k) ? "[alias]" : "") << (n > 0 ? " (inactive)" : "")
          << ": "
          << kf.debug()
          // c10 prints the schema it infers from a typed kernel here; ka does not infer one.
          << " :: (none) [ " << (kf.is_fallthrough() ? "fallthrough " : "") << "boxed "
          << (kf.signature() != nullptr ? "unboxed " : "") << "]\n";
      ++n;
    }
  }
  return out.str();
}

std::string OperatorHandle::dump_computed_table() const {
  Dispatcher::Impl& impl = *Dispatcher::singleton().impl_;
  std::lock_guard<std::mutex> lock(impl.mutex);
  return impl.dump_computed_table(cold_of(entry_));
}

void OperatorHandle::check_invariants() const {
  Dispatcher::Impl& impl = *Dispatcher::singleton().impl_;
  std::lock_guard<std::mutex> lock(impl.mutex);
  const detail::OperatorCold& op = cold_of(entry_);
  if (op.stale) return;  // No def and no kernel: see publish_all().
  const detail::DispatchTable& published = entry_->current();
  const auto computed = impl.build(op);
  for (int i = 0; i < kNumRuntimeEntries; ++i) {
    const auto& a = published.entries[static_cast<std::size_t>(i)];
    const auto& b = computed->entries[static_cast<std::size_t>(i)];
    KA_ASSERT(a.origin == b.origin && a.boxed == b.boxed && a.unboxed == b.unboxed &&
                  a.fallthrough == b.fallthrough,
              "operator ", op.name, ": the published table entry for ",
              to_string(runtime_key_of_entry(i)),
              " differs from the computed one; computed table:\n", impl.dump_computed_table(op));
  }
  KA_ASSERT(published.non_fallthrough == computed->non_fallthrough, "operator ", op.name,
            ": the published fallthrough masks differ from the computed ones");
  KA_ASSERT(
      published.num_args == op.num_args && published.dispatch_arg_bits == op.dispatch_arg_bits,
      "operator ", op.name, ": the published schema information is stale");
  for (DispatchKey k : {DispatchKey::Dense, DispatchKey::AutogradFunctionality}) {
    KA_ASSERT(op.kernels[static_cast<std::size_t>(k)].empty(), "operator ", op.name,
              ": a kernel is registered to the per-backend functionality key ", to_string(k));
  }
}

bool OperatorHandle::has_kernel_for_dispatch_key(DispatchKey k) const {
  Dispatcher::Impl& impl = *Dispatcher::singleton().impl_;
  std::lock_guard<std::mutex> lock(impl.mutex);
  return !cold_of(entry_).kernels[static_cast<std::size_t>(k)].empty();
}

std::string OperatorHandle::list_all_dispatch_keys() const {
  return Dispatcher::Impl::list_all_dispatch_keys(entry_->current());
}

void OperatorHandle::report_error(DispatchKey k) const {
  std::string keys;
  std::string table;
  {
    Dispatcher::Impl& impl = *Dispatcher::singleton().impl_;
    std::lock_guard<std::mutex> lock(impl.mutex);
    keys = Dispatcher::Impl::list_all_dispatch_keys(entry_->current());
    table = impl.dump_computed_table(cold_of(entry_));
  }
  if (k == DispatchKey::Undefined) {
    KA_THROW(NotImplementedError,
             "There were no tensor arguments to this function (e.g., you passed an empty list "
             "of Tensors), but no fallback function is registered for schema ",
             name(),
             ".  This usually means that this function requires a non-empty list of Tensors, "
             "or that you (the operator writer) forgot to register a fallback function.  "
             "Available functions are ",
             keys, ".\n\n", table);
  }
  KA_THROW(NotImplementedError, "Could not run '", name(), "' with arguments from the '",
           to_string(k),
           "' backend. This could be because the operator doesn't exist for this "
           "backend, or was omitted during the selective/custom build process (if using custom "
           "build). '",
           name(), "' is only available for these backends: ", keys, ".\n\n", table);
}

}  // namespace ka::dispatch
