// KernelFunction: a boxed or unboxed kernel, callable in either convention.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <cstddef>
#include <ka/dispatch/dispatch_key.hpp>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

namespace ka::dispatch {

class OperatorHandle;

/// The boxed calling convention: arguments on a stack of IValues, replaced by the results.
using Stack = std::vector<c10::IValue>;

namespace detail {

/// A type-erased function pointer (the one type GCC's -Wcast-function-type lets any
/// function pointer round-trip through).
using ErasedFn = void (*)();
using BoxedFn = void (*)(const OperatorHandle&, DispatchKeySet, Stack*);
using UnboxingAdapter = void (*)(ErasedFn, bool, const OperatorHandle&, DispatchKeySet, Stack*);

/// A unique address per C++ signature, used to check that typed calls and unboxed kernels
/// agree (see Note [Typed call safety]).
template <class Sig>
const void* signature_tag() noexcept {
  static const char tag = 0;
  return &tag;
}

/// Called when a table entry holds no kernel: throws the "Could not run" error.
void missing_kernel(const OperatorHandle& op, DispatchKeySet ks, Stack* stack);
/// Called if a fallthrough kernel is ever run (only possible for the Undefined entry).
void fallthrough_kernel(const OperatorHandle& op, DispatchKeySet ks, Stack* stack);

// Note [Hot kernel]
// What a dispatch table stores per entry: plain function pointers, no strings, so an entry
// is 40 bytes and a table snapshot is self-contained (it never points into the cold
// registration lists). `origin` identifies the registration the entry came from; it is
// compared, never dereferenced (check_invariants()).
struct HotKernel {
  ErasedFn unboxed = nullptr;          ///< The user's typed function, or nullptr.
  BoxedFn boxed = nullptr;             ///< The user's boxed function, or nullptr.
  UnboxingAdapter unboxing = nullptr;  ///< Runs `unboxed` on a stack (when boxed is null).
  bool takes_key_set = false;          ///< `unboxed` has a leading DispatchKeySet parameter.
  bool fallthrough = false;
  const void* origin = nullptr;

  void call_boxed(const OperatorHandle& op, DispatchKeySet ks, Stack* stack) const {
    if (boxed != nullptr) {
      boxed(op, ks, stack);
    } else {
      unboxing(unboxed, takes_key_set, op, ks, stack);
    }
  }
};

// ---- Boxing: an unboxed (typed) call served by a boxed kernel. ----

template <class T>
void push_value(Stack& stack, T&& value) {
  stack.emplace_back(std::forward<T>(value));
}

template <class Ret>
struct PopResult {
  static Ret pop(Stack& stack) {
    Ret r = std::move(stack.back()).template to<Ret>();
    stack.pop_back();
    return r;
  }
};
template <>
struct PopResult<void> {
  static void pop(Stack& /*stack*/) {}
};
template <class... Ts>
struct PopResult<std::tuple<Ts...>> {
  static std::tuple<Ts...> pop(Stack& stack) {
    return pop_impl(stack, std::index_sequence_for<Ts...>{});
  }
  template <std::size_t... I>
  static std::tuple<Ts...> pop_impl(Stack& stack, std::index_sequence<I...>) {
    const std::size_t base = stack.size() - sizeof...(Ts);
    return std::tuple<Ts...>(std::move(stack[base + I]).template to<Ts>()...);
  }
};

template <class Ret, class... Args>
Ret call_boxed_kernel_unboxed(const HotKernel& k, const OperatorHandle& op, DispatchKeySet ks,
                              Args... args) {
  Stack stack;
  stack.reserve(sizeof...(Args) > 0 ? sizeof...(Args) : 1);
  (push_value(stack, std::forward<Args>(args)), ...);
  k.call_boxed(op, ks, &stack);
  return PopResult<Ret>::pop(stack);
}

/// The typed call of a kernel table entry: a direct call of the user's function when it is
/// typed, the boxing adapter otherwise (boxed kernels, fallbacks, missing entries).
template <class Ret, class... Args>
inline Ret call_unboxed(const HotKernel& k, const OperatorHandle& op, DispatchKeySet ks,
                        Args... args) {
  if (__builtin_expect(k.unboxed != nullptr, 1)) {
    if (k.takes_key_set) {
      return reinterpret_cast<Ret (*)(DispatchKeySet, Args...)>(k.unboxed)(
          ks, std::forward<Args>(args)...);
    }
    return reinterpret_cast<Ret (*)(Args...)>(k.unboxed)(std::forward<Args>(args)...);
  }
  return call_boxed_kernel_unboxed<Ret, Args...>(k, op, ks, std::forward<Args>(args)...);
}

// ---- Unboxing: a boxed call served by an unboxed kernel. ----

template <class T>
struct ArgFromIValue {
  static std::decay_t<T> get(c10::IValue& v) { return v.template to<std::decay_t<T>>(); }
};
// Tensors are passed by reference into the stack: no reference-count traffic.
template <>
struct ArgFromIValue<const at::Tensor&> {
  static const at::Tensor& get(c10::IValue& v) { return v.toTensor(); }
};
template <>
struct ArgFromIValue<at::Tensor&> {
  static at::Tensor& get(c10::IValue& v) { return v.toTensor(); }
};
// A TensorList argument views a vector that lives until the kernel returns.
template <>
struct ArgFromIValue<c10::ArrayRef<at::Tensor>> {
  static std::vector<at::Tensor> get(c10::IValue& v) { return v.toTensorVector(); }
};

template <class Ret>
struct PushResult {
  static void push(Stack& stack, Ret&& r) { stack.emplace_back(std::move(r)); }
};
template <class... Ts>
struct PushResult<std::tuple<Ts...>> {
  static void push(Stack& stack, std::tuple<Ts...>&& r) {
    std::apply([&](auto&&... v) { (stack.emplace_back(std::move(v)), ...); }, std::move(r));
  }
};

/// Pops `n` values (inline, unlike vector::erase).
inline void drop(Stack& stack, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) stack.pop_back();
}

template <class Sig>
struct Unboxer;
template <class Ret, class... Args>
struct Unboxer<Ret(Args...)> {
  static void run(ErasedFn fn, bool takes_key_set, const OperatorHandle& /*op*/, DispatchKeySet ks,
                  Stack* stack) {
    run_impl(fn, takes_key_set, ks, *stack, std::index_sequence_for<Args...>{});
  }
  template <std::size_t... I>
  static void run_impl(ErasedFn fn, bool takes_key_set, DispatchKeySet ks, Stack& stack,
                       std::index_sequence<I...>) {
    constexpr std::size_t n = sizeof...(Args);
    c10::IValue* base = stack.data() + (stack.size() - n);
    (void)base;
    if constexpr (std::is_void_v<Ret>) {
      if (takes_key_set) {
        reinterpret_cast<Ret (*)(DispatchKeySet, Args...)>(fn)(
            ks, ArgFromIValue<Args>::get(base[I])...);
      } else {
        reinterpret_cast<Ret (*)(Args...)>(fn)(ArgFromIValue<Args>::get(base[I])...);
      }
      drop(stack, n);
    } else {
      Ret r = takes_key_set
                  ? reinterpret_cast<Ret (*)(DispatchKeySet, Args...)>(fn)(
                        ks, ArgFromIValue<Args>::get(base[I])...)
                  : reinterpret_cast<Ret (*)(Args...)>(fn)(ArgFromIValue<Args>::get(base[I])...);
      drop(stack, n);
      PushResult<Ret>::push(stack, std::move(r));
    }
  }
};

template <class FuncPtr>
struct FunctionTraits;
template <class Ret, class... Args>
struct FunctionTraits<Ret (*)(Args...)> {
  using Signature = Ret(Args...);
  static constexpr bool kTakesKeySet = false;
};
template <class Ret, class... Args>
struct FunctionTraits<Ret (*)(DispatchKeySet, Args...)> {
  using Signature = Ret(Args...);
  static constexpr bool kTakesKeySet = true;
};

}  // namespace detail

/// A kernel: a boxed function (IValue stack), a typed function pointer, or a fallthrough
/// marker. Either kind serves both boxed and typed calls (adapters box or unbox the
/// arguments). `debug` is what dumps print for it (c10 uses "registered at file:line").
///
///   int64_t add_one(const at::Tensor& x);
///   auto k = KernelFunction::from_unboxed(&add_one, "registered at my_ops.cpp:12");
class KernelFunction {
 public:
  using BoxedFn = detail::BoxedFn;

  /// An empty (invalid) kernel.
  KernelFunction() = default;

  /// A boxed kernel: it pops its arguments from the stack and pushes its results.
  static KernelFunction from_boxed(BoxedFn fn, std::string debug);

  /// A typed kernel: a plain `Ret(*)(Args...)`, optionally with a leading DispatchKeySet.
  template <class FuncPtr>
  static KernelFunction from_unboxed(FuncPtr fn, std::string debug) {
    static_assert(std::is_pointer_v<FuncPtr> && std::is_function_v<std::remove_pointer_t<FuncPtr>>,
                  "from_unboxed takes a plain function pointer");
    using Traits = detail::FunctionTraits<FuncPtr>;
    using Sig = typename Traits::Signature;
    KernelFunction k;
    k.hot_.unboxed = reinterpret_cast<detail::ErasedFn>(fn);
    k.hot_.unboxing = &detail::Unboxer<Sig>::run;
    k.hot_.takes_key_set = Traits::kTakesKeySet;
    k.signature_ = detail::signature_tag<Sig>();
    k.signature_name_ = typeid(Sig).name();
    k.debug_ = std::move(debug);
    return k;
  }

  /// A fallthrough: the dispatcher skips its key (it is never run, see Note [Fallthrough]).
  static KernelFunction fallthrough(std::string debug = {});

  [[nodiscard]] bool is_valid() const noexcept {
    return hot_.boxed != nullptr || hot_.unboxed != nullptr;
  }
  [[nodiscard]] bool is_fallthrough() const noexcept { return hot_.fallthrough; }
  [[nodiscard]] bool is_boxed() const noexcept { return hot_.boxed != nullptr; }
  [[nodiscard]] const std::string& debug() const noexcept { return debug_; }
  /// Replaces the string dumps print for this kernel.
  void set_debug(std::string debug) { debug_ = std::move(debug); }
  /// Identity of the typed signature, or nullptr for boxed kernels.
  [[nodiscard]] const void* signature() const noexcept { return signature_; }
  [[nodiscard]] const char* signature_name() const noexcept { return signature_name_; }

  /// Runs the kernel on a stack.
  void call_boxed(const OperatorHandle& op, DispatchKeySet ks, Stack* stack) const {
    hot_.call_boxed(op, ks, stack);
  }
  /// Runs the kernel with typed arguments; `Ret(Args...)` must be the kernel's signature
  /// when it is typed (checked by OperatorHandle::typed(), not here).
  template <class Ret, class... Args>
  Ret call(const OperatorHandle& op, DispatchKeySet ks, Args... args) const {
    return detail::call_unboxed<Ret, Args...>(hot_, op, ks, std::forward<Args>(args)...);
  }

  [[nodiscard]] const detail::HotKernel& hot() const noexcept { return hot_; }

 private:
  detail::HotKernel hot_;
  const void* signature_ = nullptr;
  const char* signature_name_ = "";
  std::string debug_;
};

}  // namespace ka::dispatch
