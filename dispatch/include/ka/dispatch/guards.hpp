// Thread-local included/excluded dispatch keys and the RAII guards that change them.
#pragma once

#include <cstdint>
#include <ka/dispatch/dispatch_key.hpp>

namespace ka::dispatch {

namespace detail {

// Note [Thread-local key sets]
// Each thread holds the keys it adds to (included) and removes from (excluded) every call's
// key set. They are stored XOR'd with the defaults (kDefaultIncludedSet: BackendSelect and
// ADInplaceOrView) so that zero-initialised storage means "defaults" and the TLS needs no
// dynamic initialisation: a call reads it with one thread-pointer-relative load. The same
// block caches the last translation of a c10 key set into ka's layout (see
// Note [c10 key sets]), which a call needs right after reading the sets.
struct LocalState {
  std::uint64_t included_xor = 0;
  std::uint64_t excluded_xor = 0;
  std::uint64_t last_c10_repr = 0;  ///< c10 key set last translated (0 translates to 0).
  std::uint64_t last_ka_repr = 0;   ///< Its translation.
};

inline LocalState& local_state() noexcept {
  static thread_local LocalState state;
  return state;
}

}  // namespace detail

/// The keys added to, and removed from, every dispatch on this thread.
struct LocalDispatchKeySet {
  DispatchKeySet included;
  DispatchKeySet excluded;
};

/// This thread's included/excluded sets (defaults: BackendSelect, ADInplaceOrView included).
inline LocalDispatchKeySet tls_local_dispatch_key_set() noexcept {
  const detail::LocalState& s = detail::local_state();
  return {DispatchKeySet::from_raw(s.included_xor) ^ kDefaultIncludedSet,
          DispatchKeySet::from_raw(s.excluded_xor) ^ kDefaultExcludedSet};
}
/// Replaces this thread's included/excluded sets.
inline void tls_set_local_dispatch_key_set(LocalDispatchKeySet sets) noexcept {
  detail::LocalState& s = detail::local_state();
  s.included_xor = (sets.included ^ kDefaultIncludedSet).raw_repr();
  s.excluded_xor = (sets.excluded ^ kDefaultExcludedSet).raw_repr();
}

/// Adds `keys` to this thread's included set for the guard's lifetime.
///
///   { IncludeDispatchKeyGuard g(DispatchKey::Tracer); op.call(x); }  // Tracer kernels run
class IncludeDispatchKeyGuard {
 public:
  explicit IncludeDispatchKeyGuard(DispatchKeySet keys) noexcept;
  explicit IncludeDispatchKeyGuard(DispatchKey key) noexcept
      : IncludeDispatchKeyGuard(DispatchKeySet(key)) {}
  ~IncludeDispatchKeyGuard();
  IncludeDispatchKeyGuard(const IncludeDispatchKeyGuard&) = delete;
  IncludeDispatchKeyGuard& operator=(const IncludeDispatchKeyGuard&) = delete;

 private:
  DispatchKeySet added_;  ///< Only the keys that were not included before.
};

/// Adds `keys` to this thread's excluded set for the guard's lifetime.
class ExcludeDispatchKeyGuard {
 public:
  explicit ExcludeDispatchKeyGuard(DispatchKeySet keys) noexcept;
  explicit ExcludeDispatchKeyGuard(DispatchKey key) noexcept
      : ExcludeDispatchKeyGuard(DispatchKeySet(key)) {}
  ~ExcludeDispatchKeyGuard();
  ExcludeDispatchKeyGuard(const ExcludeDispatchKeyGuard&) = delete;
  ExcludeDispatchKeyGuard& operator=(const ExcludeDispatchKeyGuard&) = delete;

 private:
  DispatchKeySet added_;  ///< Only the keys that were not excluded before.
};

/// Skips every autograd key while alive (c10's at::AutoDispatchBelowAutograd): calls go
/// straight to the backend or composite kernels.
class AutoDispatchBelowAutograd {
 public:
  AutoDispatchBelowAutograd() noexcept : guard_(kAutogradKeySet) {}

 private:
  ExcludeDispatchKeyGuard guard_;
};

inline IncludeDispatchKeyGuard::IncludeDispatchKeyGuard(DispatchKeySet keys) noexcept {
  detail::LocalState& s = detail::local_state();
  const std::uint64_t included = s.included_xor ^ kDefaultIncludedSet.raw_repr();
  added_ = DispatchKeySet::from_raw(keys.raw_repr() & ~included);
  s.included_xor ^= added_.raw_repr();
}
inline IncludeDispatchKeyGuard::~IncludeDispatchKeyGuard() {
  detail::local_state().included_xor ^= added_.raw_repr();
}

inline ExcludeDispatchKeyGuard::ExcludeDispatchKeyGuard(DispatchKeySet keys) noexcept {
  detail::LocalState& s = detail::local_state();
  const std::uint64_t excluded = s.excluded_xor ^ kDefaultExcludedSet.raw_repr();
  added_ = DispatchKeySet::from_raw(keys.raw_repr() & ~excluded);
  s.excluded_xor ^= added_.raw_repr();
}
inline ExcludeDispatchKeyGuard::~ExcludeDispatchKeyGuard() {
  detail::local_state().excluded_xor ^= added_.raw_repr();
}

}  // namespace ka::dispatch
