#include <ka/core/error.hpp>
#include <ka/core/logging.hpp>
#include <ka/extractor/kernel_registry.hpp>

#include <algorithm>

namespace ka::extractor {

const KernelEntry& KernelRegistry::add(KernelEntry entry) {
  KA_CHECK(entry.descriptor != nullptr, "KernelRegistry::add(", entry.signature,
           "): no descriptor");
  KA_CHECK(entry.device == device_, "KernelRegistry(", to_string(device_), "): entry for ",
           entry.signature, " is for ", to_string(entry.device));
  std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = entries_[entry.signature];
  if (slot) {
    log().warn("kernel for {} on {} replaced: {} -> {}", entry.signature, to_string(device_),
               slot->descriptor->name, entry.descriptor->name);
    *slot = std::move(entry);  // keep the address: extractors cache entry pointers
  } else {
    slot = std::make_unique<KernelEntry>(std::move(entry));
  }
  return *slot;
}

const KernelEntry& KernelRegistry::set_default(KernelEntry entry) {
  KA_CHECK(entry.descriptor != nullptr, "KernelRegistry::set_default: no descriptor");
  std::lock_guard<std::mutex> lock(mutex_);
  entry.is_default = true;
  default_ = std::make_unique<KernelEntry>(std::move(entry));
  return *default_;
}

const KernelEntry* KernelRegistry::find_exact(std::string_view signature) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = entries_.find(signature);
  return it == entries_.end() ? nullptr : it->second.get();
}

const KernelEntry& KernelRegistry::find(std::string_view signature) const {
  if (log().should_log(spdlog::level::trace)) {
    log().trace("kernel lookup: {} on {}", signature, to_string(device_));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (const auto it = entries_.find(signature); it != entries_.end()) return *it->second;
  if (default_) {
    if (std::find(warned_.begin(), warned_.end(), signature) == warned_.end()) {
      warned_.emplace_back(signature);
      log().warn("no kernel for {} on {}: using the registered default kernel {}", signature,
                 to_string(device_), default_->descriptor->name);
    }
    return *default_;
  }
  std::string known;
  for (const auto& [sig, e] : entries_) known += (known.empty() ? "" : ", ") + sig;
  KA_THROW(NotImplementedError, "kernel not found for ", signature, " on ", to_string(device_),
           " (registered: ", known.empty() ? std::string("none") : known, ")");
}

std::vector<std::string> KernelRegistry::signatures() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> out;
  for (const auto& [sig, e] : entries_) out.push_back(sig);
  return out;
}

}  // namespace ka::extractor
