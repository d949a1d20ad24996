// The Dispatcher (the "KernelAgent"): operators, their kernel tables, and the call paths.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <ka/core/error.hpp>
#include <ka/dispatch/dispatch_key.hpp>
#include <ka/dispatch/guards.hpp>
#include <ka/dispatch/kernel_function.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ka::dispatch {

template <class Sig>
class TypedOperatorHandle;

namespace detail {

// Note [Lock-free calls]
// Each operator publishes an immutable DispatchTable through one atomic pointer. A call loads
// the pointer (acquire), computes its key set, indexes the table and calls: no lock, no
// reference count. Registration (under the dispatcher's mutex) builds a complete new table
// from the cold registration lists and publishes it (release), so a caller sees either the
// old or the new table, never a half-updated one, and the table always equals the computed
// table. A new table is published only when it differs from the current one. Replaced
// tables are retired, not freed, because a concurrent caller may still read them: about
// 650 bytes per effective registration change, kept for the life of the process (the
// dispatcher is never destroyed). A fallback change republishes only live operators (with a
// def or a kernel); dead ones are marked stale and republished when registered again, so
// short-lived operators do not make every later fallback change cost memory.
// See check_invariants().

/// An operator's published kernel table. See Note [Lock-free calls].
struct DispatchTable {
  /// Keys whose entry is not a fallthrough, per backend slot (see backend_slot()).
  std::array<std::uint64_t, kNumBackends> non_fallthrough{};
  std::uint32_t num_args = 0;           ///< Arguments in the schema (0 before def()).
  std::uint64_t dispatch_arg_bits = 0;  ///< Bit i: argument i may hold tensors.
  std::array<HotKernel, kNumRuntimeEntries> entries{};
};

struct OperatorCold;  // Registrations and schema, private to the dispatcher.

/// One operator: the published table (hot) and its registrations (cold). Never freed while
/// the dispatcher lives, so OperatorHandles stay valid.
struct OperatorEntry {
  std::atomic<const DispatchTable*> table{nullptr};
  OperatorCold* cold = nullptr;

  [[nodiscard]] const DispatchTable& current() const noexcept {
    return *table.load(std::memory_order_acquire);
  }
};

// Note [c10 key sets]
// Tensors carry c10's key set, whose layout depends on the libtorch version. A call translates
// the union of its arguments' c10 sets into ka's layout once; the last translation is cached
// in the thread's LocalState, so the common case (the same kind of tensors as last time) is
// one compare. c10 functionalities ka does not model (Sparse, Quantized, Python, ...) are
// dropped by the translation.

/// Translates a c10 key set (raw) into ka's layout, without the cache.
std::uint64_t translate_c10_key_set(std::uint64_t c10_repr) noexcept;

inline std::uint64_t translate_c10_key_set_cached(LocalState& s, std::uint64_t c10_repr) noexcept {
  if (__builtin_expect(c10_repr == s.last_c10_repr, 1)) return s.last_ka_repr;
  const std::uint64_t ka_repr = translate_c10_key_set(c10_repr);
  s.last_c10_repr = c10_repr;
  s.last_ka_repr = ka_repr;
  return ka_repr;
}

inline std::uint64_t c10_key_set_of(const at::Tensor& t) noexcept { return t.key_set().raw_repr(); }
inline std::uint64_t c10_key_set_of(const c10::optional<at::Tensor>& t) noexcept {
  return t.has_value() ? t->key_set().raw_repr() : 0;
}
inline std::uint64_t c10_key_set_of(c10::ArrayRef<at::Tensor> ts) noexcept {
  std::uint64_t r = 0;
  for (const at::Tensor& t : ts) r |= t.key_set().raw_repr();
  return r;
}
inline std::uint64_t c10_key_set_of(const std::vector<at::Tensor>& ts) noexcept {
  return c10_key_set_of(c10::ArrayRef<at::Tensor>(ts));
}
inline std::uint64_t c10_key_set_of(const c10::List<c10::optional<at::Tensor>>& ts) {
  std::uint64_t r = 0;
  for (const c10::optional<at::Tensor>& t : ts) r |= c10_key_set_of(t);
  return r;
}
/// Arguments that are not tensors carry no keys.
template <class T>
std::uint64_t c10_key_set_of(const T& /*value*/) noexcept {
  return 0;
}

/// Keys of an IValue that is not a plain tensor (lists, optional-tensor lists).
std::uint64_t c10_key_set_of_ivalue_slow(const c10::IValue& v);

/// The union of the c10 key sets of the dispatch arguments at the top of `stack`.
inline std::uint64_t c10_key_set_of_stack(const DispatchTable& t, const Stack& stack) {
  KA_CHECK(stack.size() >= t.num_args, "boxed call with ", stack.size(),
           " values on the stack, but the operator takes ", t.num_args, " arguments");
  const c10::IValue* base = stack.data() + (stack.size() - t.num_args);
  std::uint64_t bits = t.dispatch_arg_bits;
  std::uint64_t r = 0;
  while (bits != 0) {
    const c10::IValue& v = base[__builtin_ctzll(bits)];
    bits &= bits - 1;
    if (__builtin_expect(v.isTensor(), 1)) {
      r |= v.unsafeToTensorImpl()->key_set().raw_repr();  // isTensor() checked
    } else if (!v.isNone()) {
      r |= c10_key_set_of_ivalue_slow(v);
    }
  }
  return r;
}

/// Which non-fallthrough mask applies: the highest backend of the arguments (none -> CPU's).
inline int backend_slot(std::uint64_t ka_repr) noexcept {
  return 63 - __builtin_clzll((ka_repr & DispatchKeySet::kBackendMask) | 1);
}

/// ((arguments | thread-included) - thread-excluded) & the operator's non-fallthrough keys.
inline std::uint64_t effective_key_set(std::uint64_t args, const LocalState& s,
                                       const DispatchTable& t) noexcept {
  const std::uint64_t included = s.included_xor ^ kDefaultIncludedSet.raw_repr();
  const std::uint64_t excluded = s.excluded_xor ^ kDefaultExcludedSet.raw_repr();
  const std::uint64_t mask = t.non_fallthrough[static_cast<std::size_t>(backend_slot(args))];
  return (args | included) & (DispatchKeySet::kBackendMask | ~excluded) & mask;
}

}  // namespace detail

/// A registered operator. Cheap to copy; valid for the life of the process.
///
///   auto op = Dispatcher::singleton().find_op_or_throw("myops::scale");
///   Stack stack{tensor, 2.0};
///   op.call_boxed(&stack);                          // stack now holds the result
///   auto typed = op.typed<at::Tensor(const at::Tensor&, double)>();
///   at::Tensor y = typed.call(tensor, 2.0);
class OperatorHandle {
 public:
  /// "ns::name" or "ns::name.overload".
  [[nodiscard]] const std::string& name() const noexcept;
  /// The schema given to def() (empty before def()).
  [[nodiscard]] const std::string& schema() const noexcept;

  /// Dispatches on the arguments at the top of `stack` (schema positions) and runs the
  /// kernel, which replaces the arguments with the results. Throws ka::NotImplementedError
  /// when no kernel serves the key set.
  __attribute__((always_inline)) void call_boxed(Stack* stack) const {
    const detail::DispatchTable& t = entry_->current();
    detail::LocalState& s = detail::local_state();
    const std::uint64_t args =
        detail::translate_c10_key_set_cached(s, detail::c10_key_set_of_stack(t, *stack));
    const auto ks = DispatchKeySet::from_raw(detail::effective_key_set(args, s, t));
    t.entries[static_cast<std::size_t>(runtime_entry_index(ks))].call_boxed(*this, ks, stack);
  }
  /// Runs the kernel for `ks` as given: no thread-local sets, no fallthrough mask (c10's
  /// redispatch). Kernels pass e.g. `ks & kAfterAutogradKeySet`.
  void redispatch_boxed(DispatchKeySet ks, Stack* stack) const {
    const detail::DispatchTable& t = entry_->current();
    t.entries[static_cast<std::size_t>(runtime_entry_index(ks))].call_boxed(*this, ks, stack);
  }

  /// A handle for typed calls with C++ signature `Sig` (`Ret(Args...)`). Throws
  /// ka::ValueError when a typed kernel of the operator has another signature.
  template <class Sig>
  [[nodiscard]] TypedOperatorHandle<Sig> typed() const {
    assert_signature(detail::signature_tag<Sig>(), typeid(Sig).name());
    return TypedOperatorHandle<Sig>(entry_);
  }

  /// Registration state, in c10's dumpState() format.
  [[nodiscard]] std::string dump_state() const;
  /// The computed kernel table, in c10's dumpComputedTable() format:
  /// `<Key>: [fallthrough ]<debug> [<provenance>]`, one line per key with a kernel.
  [[nodiscard]] std::string dump_computed_table() const;
  /// Throws ka::InternalError unless the published table equals the computed table.
  void check_invariants() const;
  /// True when a kernel is registered directly to `k` (runtime or alias key).
  [[nodiscard]] bool has_kernel_for_dispatch_key(DispatchKey k) const;
  /// The runtime keys whose table entry holds a kernel: "[CPU, BackendSelect, ...]".
  [[nodiscard]] std::string list_all_dispatch_keys() const;
  /// Throws the "Could not run" (or "no tensor arguments") ka::NotImplementedError for `k`.
  [[noreturn]] void report_error(DispatchKey k) const;

  bool operator==(const OperatorHandle& o) const noexcept { return entry_ == o.entry_; }
  bool operator!=(const OperatorHandle& o) const noexcept { return entry_ != o.entry_; }

 protected:
  explicit OperatorHandle(detail::OperatorEntry* entry) noexcept : entry_(entry) {}
  void assert_signature(const void* tag, const char* name) const;

  detail::OperatorEntry* entry_;

  friend class Dispatcher;
};

// Note [Typed call safety]
// A typed call casts the table's function pointer to `Ret(*)(Args...)`. That is sound because
// every typed kernel of an operator must share one C++ signature (checked at registration),
// typed<Sig>() checks `Sig` against it (and records `Sig` when no typed kernel exists yet,
// so a later kernel with another signature is refused), and fallbacks must be boxed.

template <class Sig>
class TypedOperatorHandle;

/// A handle for typed calls; see OperatorHandle::typed().
template <class Ret, class... Args>
class TypedOperatorHandle<Ret(Args...)> : public OperatorHandle {
 public:
  /// Dispatches on the tensor arguments and calls the kernel.
  Ret call(Args... args) const {
    const detail::DispatchTable& t = entry_->current();
    detail::LocalState& s = detail::local_state();
    const std::uint64_t c10_args = (std::uint64_t{0} | ... | detail::c10_key_set_of(args));
    const std::uint64_t ka_args = detail::translate_c10_key_set_cached(s, c10_args);
    const auto ks = DispatchKeySet::from_raw(detail::effective_key_set(ka_args, s, t));
    return detail::call_unboxed<Ret, Args...>(
        t.entries[static_cast<std::size_t>(runtime_entry_index(ks))], *this, ks,
        std::forward<Args>(args)...);
  }
  /// Calls the kernel for `ks` as given (see OperatorHandle::redispatch_boxed()).
  Ret redispatch(DispatchKeySet ks, Args... args) const {
    const detail::DispatchTable& t = entry_->current();
    return detail::call_unboxed<Ret, Args...>(
        t.entries[static_cast<std::size_t>(runtime_entry_index(ks))], *this, ks,
        std::forward<Args>(args)...);
  }

 private:
  explicit TypedOperatorHandle(detail::OperatorEntry* entry) noexcept : OperatorHandle(entry) {}
  friend class OperatorHandle;
};

/// Undoes one registration when destroyed (or on reset()). Move-only.
class RegistrationHandle {
 public:
  RegistrationHandle() = default;
  explicit RegistrationHandle(std::function<void()> undo) : undo_(std::move(undo)) {}
  RegistrationHandle(RegistrationHandle&& o) noexcept : undo_(std::move(o.undo_)) {
    o.undo_ = nullptr;
  }
  RegistrationHandle& operator=(RegistrationHandle&& o) noexcept;
  RegistrationHandle(const RegistrationHandle&) = delete;
  RegistrationHandle& operator=(const RegistrationHandle&) = delete;
  ~RegistrationHandle() { reset(); }
  /// Undoes the registration now.
  void reset() noexcept;

 private:
  std::function<void()> undo_;
};

/// The process-wide registry of operators, kernels and backend fallbacks. Registration is
/// thread-safe (one mutex); calls never lock (see Note [Lock-free calls]). Most code
/// registers through ka::dispatch::Library rather than the register_* functions.
///
///   auto op = Dispatcher::singleton().find_op("aten::addmm");
///   if (op) std::cout << op->dump_computed_table();
class Dispatcher {
 public:
  /// The process-wide dispatcher (created on first use, never destroyed).
  static Dispatcher& singleton();

  /// The defined operator called `name` ("ns::op" or "ns::op.overload"), if any.
  [[nodiscard]] std::optional<OperatorHandle> find_op(std::string_view name) const;
  /// Like find_op(); throws ka::ValueError naming the operator when it is not defined.
  [[nodiscard]] OperatorHandle find_op_or_throw(std::string_view name) const;
  /// Names of every defined operator, sorted.
  [[nodiscard]] std::vector<std::string> op_names() const;

  /// Defines an operator from its schema ("ns::name.overload(Tensor x, int n) -> Tensor").
  /// Throws ka::ValueError for a malformed schema or a duplicate definition.
  RegistrationHandle register_def(std::string_view schema, std::string debug);
  /// Registers `kernel` for `op_name` under `key` (nullopt: CompositeImplicitAutograd, c10's
  /// catch-all). The newest registration for a key wins; see Note [Overwrite].
  RegistrationHandle register_impl(std::string_view op_name, std::optional<DispatchKey> key,
                                   KernelFunction kernel);
  /// Registers a boxed (or fallthrough) kernel for every operator's `key` entry that has no
  /// kernel of its own. One per key: a second is a ka::ValueError.
  RegistrationHandle register_fallback(DispatchKey key, KernelFunction kernel);
  /// Claims namespace `ns` for one KA_LIBRARY (Library::Kind::kDef) block.
  RegistrationHandle register_library(const std::string& ns, std::string debug);

  /// check_invariants() of every operator.
  void check_invariants() const;

  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

 private:
  struct Impl;

  Dispatcher();
  ~Dispatcher();
  std::unique_ptr<Impl> impl_;

  friend class OperatorHandle;
};

}  // namespace ka::dispatch
