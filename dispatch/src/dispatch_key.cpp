#include <ka/core/error.hpp>
#include <ka/dispatch/dispatch_key.hpp>
#include <mutex>
#include <sstream>

namespace ka::dispatch {
namespace {

std::mutex& privateuse1_mutex() {
  static std::mutex m;
  return m;
}
std::string& privateuse1_name() {
  static std::string name = "PrivateUse1";
  return name;
}
std::string current_privateuse1_name() {
  std::lock_guard<std::mutex> lock(privateuse1_mutex());
  return privateuse1_name();
}

const char* fixed_name(DispatchKey k) noexcept {
  switch (k) {
    case DispatchKey::Undefined:
      return "Undefined";
    case DispatchKey::Dense:
      return "Dense";
    case DispatchKey::BackendSelect:
      return "BackendSelect";
    case DispatchKey::Functionalize:
      return "Functionalize";
    case DispatchKey::ADInplaceOrView:
      return "ADInplaceOrView";
    case DispatchKey::AutogradOther:
      return "AutogradOther";
    case DispatchKey::AutogradFunctionality:
      return "AutogradFunctionality";
    case DispatchKey::Tracer:
      return "Tracer";
    case DispatchKey::FuncTorchBatched:
      return "FuncTorchBatched";
    case DispatchKey::CPU:
      return "CPU";
    case DispatchKey::CUDA:
      return "CUDA";
    case DispatchKey::Meta:
      return "Meta";
    case DispatchKey::PrivateUse1:
      return "PrivateUse1";
    case DispatchKey::AutogradCPU:
      return "AutogradCPU";
    case DispatchKey::AutogradCUDA:
      return "AutogradCUDA";
    case DispatchKey::AutogradMeta:
      return "AutogradMeta";
    case DispatchKey::AutogradPrivateUse1:
      return "AutogradPrivateUse1";
    case DispatchKey::Autograd:
      return "Autograd";
    case DispatchKey::CompositeImplicitAutograd:
      return "CompositeImplicitAutograd";
    case DispatchKey::CompositeExplicitAutograd:
      return "CompositeExplicitAutograd";
    case DispatchKey::CompositeExplicitAutogradNonFunctional:
      return "CompositeExplicitAutogradNonFunctional";
  }
  return "UNKNOWN_TENSOR_TYPE_ID";
}

}  // namespace

std::string to_string(DispatchKey k) {
  if (k == DispatchKey::PrivateUse1) return current_privateuse1_name();
  if (k == DispatchKey::AutogradPrivateUse1) return "Autograd" + current_privateuse1_name();
  return fixed_name(k);
}

std::string to_string(BackendComponent b) {
  switch (b) {
    case BackendComponent::InvalidBit:
      return "InvalidBit";
    case BackendComponent::CPUBit:
      return "CPUBit";
    case BackendComponent::CUDABit:
      return "CUDABit";
    case BackendComponent::MetaBit:
      return "MetaBit";
    case BackendComponent::PrivateUse1Bit:
      return "PrivateUse1Bit";
  }
  return "UNKNOWN_BACKEND_BIT";
}

std::optional<DispatchKey> parse_dispatch_key(std::string_view name) {
  for (int i = 0; i < kNumDispatchKeys; ++i) {
    const auto k = static_cast<DispatchKey>(i);
    if (name == fixed_name(k) || name == to_string(k)) return k;
  }
  return std::nullopt;
}

void rename_privateuse1_backend(const std::string& name) {
  KA_CHECK(!name.empty(), "rename_privateuse1_backend: the new name is empty");
  std::lock_guard<std::mutex> lock(privateuse1_mutex());
  privateuse1_name() = name;
}

bool DispatchKeySet::has_any(DispatchKeySet o) const noexcept {
  const std::uint64_t functionality = repr_ & o.repr_ & ~kBackendMask;
  if (functionality == 0) return false;
  // Backend bits only matter when `o` names some.
  return (o.repr_ & kBackendMask) == 0 || (repr_ & o.repr_ & kBackendMask) != 0;
}

std::vector<DispatchKey> DispatchKeySet::keys() const {
  std::vector<DispatchKey> out;
  for (int f = 1; f <= kNumFunctionalities; ++f) {
    if ((repr_ & (std::uint64_t{1} << (kNumBackends + f - 1))) == 0) continue;
    const auto fk = static_cast<DispatchKey>(f);
    if (!is_per_backend_functionality(fk)) {
      out.push_back(fk);
      continue;
    }
    for (int b = 1; b <= kNumBackends; ++b) {
      if ((repr_ & (std::uint64_t{1} << (b - 1))) != 0) {
        out.push_back(to_runtime_key(fk, static_cast<BackendComponent>(b)));
      }
    }
  }
  return out;
}

std::string DispatchKeySet::to_string() const {
  std::ostringstream out;
  out << "DispatchKeySet(";
  bool first = true;
  for (DispatchKey k : keys()) {
    if (!first) out << ", ";
    out << ka::dispatch::to_string(k);
    first = false;
  }
  out << ")";
  return out.str();
}

DispatchKeySet runtime_key_set(DispatchKey k) noexcept {
  const DispatchKeySet autograd =
      DispatchKeySet{DispatchKey::AutogradOther, DispatchKey::AutogradFunctionality} |
      kFullBackendKeySet;
  const DispatchKeySet backends = DispatchKeySet(DispatchKey::Dense) | kFullBackendKeySet;
  switch (k) {
    case DispatchKey::Autograd:
      return autograd;
    case DispatchKey::CompositeImplicitAutograd:
      return autograd | backends;
    case DispatchKey::CompositeExplicitAutograd:
      return backends;
    // c10 leaves out the functional backends (XLA, Lazy) and Sparse, which ka lacks.
    case DispatchKey::CompositeExplicitAutogradNonFunctional:
      return backends;
    default:
      return DispatchKeySet(k);
  }
}

bool is_included_in_alias(DispatchKey runtime_key, DispatchKey alias) noexcept {
  return runtime_key != DispatchKey::Undefined && runtime_key_set(alias).has(runtime_key);
}

DispatchKeySet backend_key_set_from_autograd(DispatchKey k) noexcept {
  if (k >= DispatchKey::AutogradCPU && k <= DispatchKey::AutogradPrivateUse1) {
    return DispatchKeySet(to_runtime_key(DispatchKey::Dense, to_backend_component(k)));
  }
  // AutogradOther's backends (FPGA, Vulkan, ...) do not exist in ka.
  return DispatchKeySet();
}

int runtime_entry_index(DispatchKey k) noexcept {
  if (k == DispatchKey::Undefined) return 0;
  if (!is_runtime_key(k)) return -1;
  return runtime_entry_index(DispatchKeySet(k));
}

DispatchKey runtime_key_of_entry(int index) noexcept {
  static const std::array<DispatchKey, kNumRuntimeEntries> keys = [] {
    std::array<DispatchKey, kNumRuntimeEntries> out{};
    for (int i = 0; i < kNumDispatchKeys; ++i) {
      const auto k = static_cast<DispatchKey>(i);
      const int idx = runtime_entry_index(k);
      if (idx >= 0) out[static_cast<std::size_t>(idx)] = k;
    }
    return out;
  }();
  return keys[static_cast<std::size_t>(index)];
}

}  // namespace ka::dispatch
