// Library: the registration API (def, impl, fallback), with RAII deregistration.
#pragma once

#include <ka/dispatch/dispatcher.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ka::dispatch {

/// A block of registrations for one namespace, like torch::Library. Everything it registers
/// is deregistered, newest first, when it is destroyed (which restores overwritten kernels).
///
///   Library lib(Library::Kind::kFragment, "myops");
///   lib.def("scale(Tensor x, float s) -> Tensor");
///   lib.impl("scale", DispatchKey::CPU, KernelFunction::from_unboxed(&scale_cpu, "scale_cpu"));
class Library {
 public:
  /// kDef claims the namespace (one per namespace), kFragment adds definitions without
  /// claiming it, kImpl only registers kernels (for its dispatch key, if it has one).
  enum class Kind { kDef, kImpl, kFragment };

  /// `debug` names the block in dumps and errors (the macros use "registered at file:line").
  /// Throws ka::ValueError when a second kDef library claims `ns`.
  Library(Kind kind, std::string ns, std::optional<DispatchKey> key = {},
          std::string debug = "registered by ka::dispatch::Library");
  ~Library();
  Library(Library&&) noexcept;
  Library& operator=(Library&&) noexcept;
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  /// Defines an operator; the namespace may be omitted from `schema`. Not in kImpl blocks.
  Library& def(std::string_view schema);
  /// Registers `kernel` for the library's dispatch key (CompositeImplicitAutograd when it
  /// has none). `name` may omit the namespace.
  Library& impl(std::string_view name, KernelFunction kernel);
  /// Registers `kernel` for `key`; in a kImpl block with a key, `key` must be that key.
  Library& impl(std::string_view name, DispatchKey key, KernelFunction kernel);
  /// Registers a backend fallback for the library's key (kImpl blocks of namespace "_").
  Library& fallback(KernelFunction kernel);

  [[nodiscard]] Kind kind() const noexcept { return kind_; }
  [[nodiscard]] const std::string& ns() const noexcept { return ns_; }
  [[nodiscard]] std::optional<DispatchKey> key() const noexcept { return key_; }

 private:
  std::string qualified_name(std::string_view name) const;

  Kind kind_;
  std::string ns_;
  std::optional<DispatchKey> key_;
  std::string debug_;
  std::vector<RegistrationHandle> registrations_;
};

namespace detail {

/// Runs a KA_LIBRARY block at static-initialisation time and keeps its Library alive.
class LibraryInitializer {
 public:
  LibraryInitializer(Library::Kind kind, const char* ns, std::optional<DispatchKey> key,
                     void (*init)(Library&), const char* file, int line);

 private:
  Library library_;
};

}  // namespace detail
}  // namespace ka::dispatch

#define KA_DISPATCH_CONCAT_IMPL(a, b) a##b
#define KA_DISPATCH_CONCAT(a, b) KA_DISPATCH_CONCAT_IMPL(a, b)

// Note [Libraries and static linking]
// A KA_LIBRARY block registers from a static initialiser. A linker drops an object file of a
// static archive that nothing references, and its initialiser with it. Each block therefore
// defines an extern "C" anchor, `ka_library_anchor_<ns>` (one per namespace); a program that
// links the archive names it with KA_USE_LIBRARY(ns) and the block always runs. Put
// KA_LIBRARY_IMPL blocks in the same file as the KA_LIBRARY block, or link the archive whole
// (CMake's $<LINK_LIBRARY:WHOLE_ARCHIVE,...>): IMPL blocks may repeat, so they have no anchor.

/// Defines the operators of namespace `ns` (one block per namespace):
///   KA_LIBRARY(myops, m) { m.def("scale(Tensor x, float s) -> Tensor"); }
#define KA_LIBRARY(ns, m)                                                                      \
  static void KA_LIBRARY_init_##ns(::ka::dispatch::Library&);                                  \
  static const ::ka::dispatch::detail::LibraryInitializer KA_LIBRARY_static_init_##ns(         \
      ::ka::dispatch::Library::Kind::kDef, #ns, std::nullopt, &KA_LIBRARY_init_##ns, __FILE__, \
      __LINE__);                                                                               \
  extern "C" int ka_library_anchor_##ns() { return 0; }                                        \
  void KA_LIBRARY_init_##ns(::ka::dispatch::Library& m)

/// Adds definitions to namespace `ns` without claiming it (any number of blocks).
#define KA_LIBRARY_FRAGMENT(ns, m)                                                          \
  static void KA_DISPATCH_CONCAT(KA_LIBRARY_FRAGMENT_init_##ns##_,                          \
                                 __LINE__)(::ka::dispatch::Library&);                       \
  static const ::ka::dispatch::detail::LibraryInitializer KA_DISPATCH_CONCAT(               \
      KA_LIBRARY_FRAGMENT_static_init_##ns##_, __LINE__)(                                   \
      ::ka::dispatch::Library::Kind::kFragment, #ns, std::nullopt,                          \
      &KA_DISPATCH_CONCAT(KA_LIBRARY_FRAGMENT_init_##ns##_, __LINE__), __FILE__, __LINE__); \
  void KA_DISPATCH_CONCAT(KA_LIBRARY_FRAGMENT_init_##ns##_, __LINE__)(::ka::dispatch::Library & m)

/// Registers kernels of namespace `ns` for dispatch key `k` (any number of blocks):
///   KA_LIBRARY_IMPL(myops, CPU, m) { m.impl("scale", KernelFunction::from_unboxed(...)); }
#define KA_LIBRARY_IMPL(ns, k, m)                                                             \
  static void KA_DISPATCH_CONCAT(KA_LIBRARY_IMPL_init_##ns##_##k##_,                          \
                                 __LINE__)(::ka::dispatch::Library&);                         \
  static const ::ka::dispatch::detail::LibraryInitializer KA_DISPATCH_CONCAT(                 \
      KA_LIBRARY_IMPL_static_init_##ns##_##k##_, __LINE__)(                                   \
      ::ka::dispatch::Library::Kind::kImpl, #ns, ::ka::dispatch::DispatchKey::k,              \
      &KA_DISPATCH_CONCAT(KA_LIBRARY_IMPL_init_##ns##_##k##_, __LINE__), __FILE__, __LINE__); \
  void KA_DISPATCH_CONCAT(KA_LIBRARY_IMPL_init_##ns##_##k##_, __LINE__)(::ka::dispatch::Library & m)

/// Forces the object file holding KA_LIBRARY(ns, ...) into a statically linked program.
#define KA_USE_LIBRARY(ns)                                                                 \
  extern "C" int ka_library_anchor_##ns();                                                 \
  [[maybe_unused]] static const int KA_DISPATCH_CONCAT(ka_use_library_##ns##_, __LINE__) = \
      ka_library_anchor_##ns()
