// Dispatch keys and key sets, with PyTorch's (c10's) spellings and semantics.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ka::dispatch {

// Note [Key set layout]
// A DispatchKeySet is one uint64_t, laid out like c10's: the low kNumBackends bits are
// backend components (CPU, CUDA, Meta, PrivateUse1), the bits above them are functionalities
// in priority order (a higher bit wins). A "runtime key" such as AutogradCUDA is a
// per-backend functionality (AutogradFunctionality) combined with a backend (CUDA); the
// kernel to run is found with two count-leading-zeros: the highest functionality, then (for
// per-backend functionalities) the highest backend, which indexes a flat per-operator table.
// Removing keys from a set never removes backend bits (c10's `operator-`), so excluding
// AutogradFunctionality leaves CPU's Dense kernel reachable.

/// Backend components: the low bits of a DispatchKeySet. Spellings follow c10.
enum class BackendComponent : std::uint8_t {
  InvalidBit = 0,
  CPUBit,
  CUDABit,
  MetaBit,
  PrivateUse1Bit,
  EndOfBackendKeys = PrivateUse1Bit,
};

/// Number of backend components (the bits below the functionality bits).
inline constexpr int kNumBackends = static_cast<int>(BackendComponent::EndOfBackendKeys);

/// Dispatch keys with PyTorch's spellings: Undefined, the functionality keys in priority
/// order (lowest first), the per-backend runtime keys, then the alias keys.
enum class DispatchKey : std::uint8_t {
  Undefined = 0,
  // Functionality keys, lowest priority first. Dense and AutogradFunctionality are
  // per-backend: combined with a backend they form CPU, AutogradCPU, ...
  Dense,
  BackendSelect,
  Functionalize,
  ADInplaceOrView,
  AutogradOther,
  AutogradFunctionality,
  Tracer,
  FuncTorchBatched,
  EndOfFunctionalityKeys = FuncTorchBatched,
  // Per-backend runtime keys: Dense x backends.
  CPU,
  CUDA,
  Meta,
  PrivateUse1,
  // AutogradFunctionality x backends.
  AutogradCPU,
  AutogradCUDA,
  AutogradMeta,
  AutogradPrivateUse1,
  EndOfRuntimeBackendKeys = AutogradPrivateUse1,
  // Alias keys: registering to one fills several runtime keys (see runtime_key_set()).
  Autograd,
  CompositeImplicitAutograd,
  CompositeExplicitAutograd,
  CompositeExplicitAutogradNonFunctional,
  EndOfAliasKeys = CompositeExplicitAutogradNonFunctional,
};

/// Number of DispatchKey values (Undefined through the last alias key).
inline constexpr int kNumDispatchKeys = static_cast<int>(DispatchKey::EndOfAliasKeys) + 1;
/// Number of functionality keys (Dense through FuncTorchBatched).
inline constexpr int kNumFunctionalities = static_cast<int>(DispatchKey::EndOfFunctionalityKeys);

/// True for Autograd, CompositeImplicitAutograd, CompositeExplicitAutograd(NonFunctional).
constexpr bool is_alias_key(DispatchKey k) noexcept {
  return k > DispatchKey::EndOfRuntimeBackendKeys && k <= DispatchKey::EndOfAliasKeys;
}
/// True for Dense and AutogradFunctionality (functionalities that combine with a backend).
constexpr bool is_per_backend_functionality(DispatchKey k) noexcept {
  return k == DispatchKey::Dense || k == DispatchKey::AutogradFunctionality;
}
/// True for CPU, CUDA, ..., AutogradPrivateUse1.
constexpr bool is_per_backend_runtime_key(DispatchKey k) noexcept {
  return k > DispatchKey::EndOfFunctionalityKeys && k <= DispatchKey::EndOfRuntimeBackendKeys;
}
/// True for keys that own an entry in an operator's kernel table (including Undefined).
constexpr bool is_runtime_key(DispatchKey k) noexcept {
  return k <= DispatchKey::EndOfRuntimeBackendKeys && !is_per_backend_functionality(k);
}
/// True for the Dense keys of a backend (CPU, CUDA, Meta, PrivateUse1).
constexpr bool is_backend_key(DispatchKey k) noexcept {
  return k >= DispatchKey::CPU && k <= DispatchKey::PrivateUse1;
}

/// The functionality of a key: AutogradCPU -> AutogradFunctionality, CPU -> Dense; a
/// functionality key maps to itself; Undefined and alias keys map to Undefined.
constexpr DispatchKey to_functionality_key(DispatchKey k) noexcept {
  if (k <= DispatchKey::EndOfFunctionalityKeys) return k;
  if (k <= DispatchKey::PrivateUse1) return DispatchKey::Dense;
  if (k <= DispatchKey::EndOfRuntimeBackendKeys) return DispatchKey::AutogradFunctionality;
  return DispatchKey::Undefined;
}
/// The backend of a per-backend runtime key; InvalidBit for every other key.
constexpr BackendComponent to_backend_component(DispatchKey k) noexcept {
  if (k >= DispatchKey::CPU && k <= DispatchKey::PrivateUse1) {
    return static_cast<BackendComponent>(static_cast<int>(k) - static_cast<int>(DispatchKey::CPU) +
                                         1);
  }
  if (k >= DispatchKey::AutogradCPU && k <= DispatchKey::AutogradPrivateUse1) {
    return static_cast<BackendComponent>(static_cast<int>(k) -
                                         static_cast<int>(DispatchKey::AutogradCPU) + 1);
  }
  return BackendComponent::InvalidBit;
}
/// The runtime key of a per-backend functionality and a backend (Dense, CUDABit -> CUDA).
/// A functionality that is not per-backend is returned unchanged.
constexpr DispatchKey to_runtime_key(DispatchKey functionality, BackendComponent b) noexcept {
  if (b == BackendComponent::InvalidBit) return functionality;
  const int offset = static_cast<int>(b) - 1;
  if (functionality == DispatchKey::Dense) {
    return static_cast<DispatchKey>(static_cast<int>(DispatchKey::CPU) + offset);
  }
  if (functionality == DispatchKey::AutogradFunctionality) {
    return static_cast<DispatchKey>(static_cast<int>(DispatchKey::AutogradCPU) + offset);
  }
  return functionality;
}
/// The autograd key of a backend: CPUBit -> AutogradCPU (c10's getAutogradKeyFromBackend).
constexpr DispatchKey autograd_key_from_backend(BackendComponent b) noexcept {
  return b == BackendComponent::InvalidBit ? DispatchKey::AutogradOther
                                           : to_runtime_key(DispatchKey::AutogradFunctionality, b);
}

/// PyTorch's spelling of `k` ("CPU", "AutogradCUDA", "CompositeImplicitAutograd"); PrivateUse1
/// keys use the name given to rename_privateuse1_backend().
std::string to_string(DispatchKey k);
/// c10's spelling of a backend component ("CPUBit").
std::string to_string(BackendComponent b);
/// Parses PyTorch's spelling of a dispatch key; nullopt when unknown.
std::optional<DispatchKey> parse_dispatch_key(std::string_view name);
/// Renames the PrivateUse1 backend in every printed key ("PrivateUse1" -> `name`,
/// "AutogradPrivateUse1" -> "Autograd" + `name`), like torch's rename_privateuse1_backend.
/// Throws ka::ValueError for an empty name.
void rename_privateuse1_backend(const std::string& name);

/// A set of dispatch keys in one 64-bit word. See Note [Key set layout].
///
///   DispatchKeySet ks = DispatchKeySet(DispatchKey::CPU) |
///   DispatchKeySet(DispatchKey::AutogradCPU); ks.highest_priority_key();  // AutogradCPU
class DispatchKeySet {
 public:
  static constexpr std::uint64_t kBackendMask = (std::uint64_t{1} << kNumBackends) - 1;

  constexpr DispatchKeySet() noexcept = default;
  /// The set holding `k`: a functionality bit, plus the backend bit for a per-backend
  /// runtime key. Undefined and alias keys give the empty set (use runtime_key_set()).
  constexpr explicit DispatchKeySet(DispatchKey k) noexcept : repr_(bits_of(k)) {}
  /// The set holding only backend `b`.
  constexpr explicit DispatchKeySet(BackendComponent b) noexcept
      : repr_(b == BackendComponent::InvalidBit ? 0
                                                : std::uint64_t{1} << (static_cast<int>(b) - 1)) {}
  constexpr DispatchKeySet(std::initializer_list<DispatchKey> keys) noexcept {
    for (DispatchKey k : keys) repr_ |= bits_of(k);
  }
  /// A set from its raw representation (see Note [Key set layout]).
  static constexpr DispatchKeySet from_raw(std::uint64_t repr) noexcept {
    DispatchKeySet s;
    s.repr_ = repr;
    return s;
  }
  /// Every backend and every functionality.
  static constexpr DispatchKeySet full() noexcept {
    return from_raw((std::uint64_t{1} << (kNumBackends + kNumFunctionalities)) - 1);
  }
  /// Every functionality of lower priority than `k`'s, with every backend (c10's
  /// DispatchKeySet(FULL_AFTER, k)): `ks & full_after(k)` is what a kernel for `k`
  /// redispatches with.
  static constexpr DispatchKeySet full_after(DispatchKey k) noexcept {
    const int f = static_cast<int>(to_functionality_key(k));
    return from_raw(((std::uint64_t{1} << (kNumBackends + f - 1)) - 1) | kBackendMask);
  }

  [[nodiscard]] constexpr std::uint64_t raw_repr() const noexcept { return repr_; }
  [[nodiscard]] constexpr bool empty() const noexcept { return repr_ == 0; }
  /// True when every bit of `k` is present (for AutogradCPU: the functionality and CPU).
  [[nodiscard]] constexpr bool has(DispatchKey k) const noexcept {
    const std::uint64_t b = bits_of(k);
    return b != 0 && (repr_ & b) == b;
  }
  [[nodiscard]] constexpr bool has_backend(BackendComponent b) const noexcept {
    return has_all(DispatchKeySet(b));
  }
  [[nodiscard]] constexpr bool has_all(DispatchKeySet o) const noexcept {
    return (repr_ & o.repr_) == o.repr_;
  }
  /// True when the sets share a functionality and (for per-backend ones) a backend.
  [[nodiscard]] bool has_any(DispatchKeySet o) const noexcept;

  constexpr DispatchKeySet operator|(DispatchKeySet o) const noexcept {
    return from_raw(repr_ | o.repr_);
  }
  constexpr DispatchKeySet operator&(DispatchKeySet o) const noexcept {
    return from_raw(repr_ & o.repr_);
  }
  constexpr DispatchKeySet operator^(DispatchKeySet o) const noexcept {
    return from_raw(repr_ ^ o.repr_);
  }
  /// Removes the functionalities of `o`; backend bits stay (c10's semantics).
  constexpr DispatchKeySet operator-(DispatchKeySet o) const noexcept {
    return from_raw(repr_ & (kBackendMask | ~o.repr_));
  }
  constexpr bool operator==(DispatchKeySet o) const noexcept { return repr_ == o.repr_; }
  constexpr bool operator!=(DispatchKeySet o) const noexcept { return repr_ != o.repr_; }
  [[nodiscard]] constexpr DispatchKeySet add(DispatchKey k) const noexcept {
    return *this | DispatchKeySet(k);
  }
  /// Removes `k`'s functionality only (AutogradCPU removes AutogradFunctionality for every
  /// backend).
  [[nodiscard]] constexpr DispatchKeySet remove(DispatchKey k) const noexcept {
    return *this - DispatchKeySet(k);
  }
  [[nodiscard]] constexpr DispatchKeySet remove_backend(BackendComponent b) const noexcept {
    return from_raw(repr_ & ~DispatchKeySet(b).repr_);
  }

  /// The highest-priority functionality key, or Undefined.
  [[nodiscard]] constexpr DispatchKey highest_functionality_key() const noexcept {
    return static_cast<DispatchKey>(highest_bit_index(repr_ >> kNumBackends));
  }
  /// The highest backend, or InvalidBit.
  [[nodiscard]] constexpr BackendComponent highest_backend() const noexcept {
    return static_cast<BackendComponent>(highest_bit_index(repr_ & kBackendMask));
  }
  /// The runtime key a call with this set dispatches to (AutogradCUDA for a CUDA tensor).
  [[nodiscard]] constexpr DispatchKey highest_priority_key() const noexcept {
    const DispatchKey f = highest_functionality_key();
    return is_per_backend_functionality(f) ? to_runtime_key(f, highest_backend()) : f;
  }
  /// The runtime keys in the set, lowest priority first (c10's iteration order).
  [[nodiscard]] std::vector<DispatchKey> keys() const;
  /// "DispatchKeySet(CPU, ADInplaceOrView, AutogradCPU)", as c10 prints it.
  [[nodiscard]] std::string to_string() const;

 private:
  /// 1-based index of the highest set bit; 0 for 0.
  static constexpr int highest_bit_index(std::uint64_t x) noexcept {
    return x == 0 ? 0 : 64 - __builtin_clzll(x);
  }
  static constexpr std::uint64_t bits_of(DispatchKey k) noexcept {
    if (k == DispatchKey::Undefined || is_alias_key(k)) return 0;
    const DispatchKey f = to_functionality_key(k);
    std::uint64_t r = std::uint64_t{1} << (kNumBackends + static_cast<int>(f) - 1);
    const BackendComponent b = to_backend_component(k);
    if (b != BackendComponent::InvalidBit) r |= std::uint64_t{1} << (static_cast<int>(b) - 1);
    return r;
  }

  std::uint64_t repr_ = 0;
};

// Named key sets, as in c10/core/DispatchKeySet.h.

/// Every backend bit.
inline constexpr DispatchKeySet kFullBackendKeySet =
    DispatchKeySet::from_raw(DispatchKeySet::kBackendMask);
/// What AutoDispatchBelowAutograd excludes: every autograd functionality.
inline constexpr DispatchKeySet kAutogradKeySet =
    DispatchKeySet{DispatchKey::AutogradFunctionality, DispatchKey::AutogradOther};
/// Keys included in every thread by default (c10's default_included_set).
inline constexpr DispatchKeySet kDefaultIncludedSet =
    DispatchKeySet{DispatchKey::BackendSelect, DispatchKey::ADInplaceOrView};
/// Keys excluded in every thread by default (c10 excludes the Autocast keys ka lacks).
inline constexpr DispatchKeySet kDefaultExcludedSet{};
/// What `ks & kAfterAutogradKeySet` keeps when an autograd kernel redispatches.
inline constexpr DispatchKeySet kAfterAutogradKeySet =
    DispatchKeySet::full_after(DispatchKey::AutogradOther);
/// What `ks & kAfterADInplaceOrViewKeySet` keeps when an ADInplaceOrView kernel redispatches.
inline constexpr DispatchKeySet kAfterADInplaceOrViewKeySet =
    DispatchKeySet::full_after(DispatchKey::ADInplaceOrView);

/// The runtime keys an alias key fills (c10's getRuntimeDispatchKeySet); a runtime key
/// yields itself. Undefined yields the empty set (it is filled separately).
DispatchKeySet runtime_key_set(DispatchKey k) noexcept;
/// True when `runtime_key` is one of the keys `alias` fills (c10's isIncludedInAlias).
bool is_included_in_alias(DispatchKey runtime_key, DispatchKey alias) noexcept;
/// The backend keys whose kernels make an autograd key skip the math kernel
/// (c10's getBackendKeySetFromAutograd): AutogradCPU -> {CPU}; empty for other keys.
DispatchKeySet backend_key_set_from_autograd(DispatchKey k) noexcept;

// Note [Runtime table index]
// Entry 0 is Undefined; each functionality that is not per-backend owns one entry; each
// per-backend functionality owns kNumBackends entries (one per backend). The index of a key
// set is offset[highest functionality] + (highest backend - 1) for per-backend ones. A
// per-backend functionality without any backend bit lands on its CPU entry, like c10.

/// Number of entries in an operator's kernel table.
inline constexpr int kNumRuntimeEntries = 1 + kNumFunctionalities + 2 * (kNumBackends - 1);

namespace detail {

struct OffsetAndMask {
  std::uint8_t offset;
  std::uint64_t backend_mask;  ///< kBackendMask for per-backend functionalities, else 0.
};

constexpr std::array<OffsetAndMask, kNumFunctionalities + 1> make_offsets() noexcept {
  std::array<OffsetAndMask, kNumFunctionalities + 1> table{};
  int next = 1;
  table[0] = {0, 0};
  for (int f = 1; f <= kNumFunctionalities; ++f) {
    const bool per_backend = is_per_backend_functionality(static_cast<DispatchKey>(f));
    table[static_cast<std::size_t>(f)] = {static_cast<std::uint8_t>(next),
                                          per_backend ? DispatchKeySet::kBackendMask : 0};
    next += per_backend ? kNumBackends : 1;
  }
  return table;
}
inline constexpr std::array<OffsetAndMask, kNumFunctionalities + 1> kOffsets = make_offsets();

}  // namespace detail

/// The kernel-table entry for a key set (see Note [Runtime table index]). Branch-free:
/// two count-leading-zeros, one table load, an add.
inline int runtime_entry_index(DispatchKeySet ks) noexcept {
  const std::uint64_t repr = ks.raw_repr();
  // ((repr >> nb) << 1) | 1 is never zero; its highest bit is the 1-based functionality.
  const int f = 63 - __builtin_clzll(((repr >> kNumBackends) << 1) | 1);
  const detail::OffsetAndMask om = detail::kOffsets[static_cast<std::size_t>(f)];
  const int b = 63 - __builtin_clzll((repr & om.backend_mask) | 1);
  return om.offset + b;
}
/// The kernel-table entry of a runtime key; -1 for per-backend functionality and alias keys.
int runtime_entry_index(DispatchKey k) noexcept;
/// The runtime key owning table entry `index` (0 <= index < kNumRuntimeEntries).
DispatchKey runtime_key_of_entry(int index) noexcept;

}  // namespace ka::dispatch
