// KernelRegistry: per device, the kernel that serves each exact operator signature.
#pragma once

#include <ka/core/device.hpp>
#include <ka/core/launch_config.hpp>
#include <ka/core/status.hpp>
#include <ka/kernels/cpu_launch.hpp>
#include <ka/kernels/gemm.hpp>
#include <ka/kernels/kernel_descriptor.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ka::extractor {

/// How a kernel family is launched from packed arguments (the `args` a packer wrote into a
/// ParamBuffer: an ElementwiseArgs, AddmmArgs, ...).
struct KernelLaunchers {
  /// CPU: validates and prepares the grid. Null for a CUDA-only kernel.
  Status (*prepare_cpu)(const void* args, const LaunchConfig& config,
                        kernels::CpuLaunch& launch) = nullptr;
  /// CUDA: enqueues on `stream`. Null for a CPU-only kernel.
  Status (*launch_cuda)(const void* args, const LaunchConfig& config, void* stream) = nullptr;
  /// CPU GEMMs, optional: the layout `config` packs mat2 in (nullopt: none) and the packing,
  /// so that a constant weight is packed once (Note [Constant weights packed once]).
  std::optional<kernels::PackedMat2Layout> (*mat2_layout_cpu)(const void* args,
                                                              const LaunchConfig& config) = nullptr;
  void (*pack_mat2_cpu)(const void* args, const kernels::PackedMat2Layout& layout,
                        float* out) = nullptr;
};

/// One registration: `signature` (exact overload, `aten::add.Tensor`, or a fusion pattern,
/// `fused::ew_chain`) served on `device` by `descriptor`.
struct KernelEntry {
  std::string signature;
  DeviceType device = DeviceType::kCPU;
  const kernels::KernelDescriptor* descriptor = nullptr;
  KernelLaunchers launchers;
  bool is_default = false;  ///< Registered with set_default(): serves signatures with no entry.
};

/// The kernels of one device, keyed by exact signature. `aten::add.Tensor` and
/// `aten::add.Scalar` are different keys; a miss answers the explicitly registered default
/// kernel (with a warning, once per signature) or throws "kernel not found".
/// Registration takes a lock; entries are never removed, so pointers stay valid.
///
///   registry.add({"aten::relu", DeviceType::kCPU, &ew_descriptor, ew_launchers});
///   const KernelEntry& e = registry.find("aten::relu");
class KernelRegistry {
 public:
  explicit KernelRegistry(DeviceType device) : device_(device) {}

  /// Registers (or replaces, with a warning) the kernel for entry.signature.
  const KernelEntry& add(KernelEntry entry);
  /// Registers the kernel used for signatures without their own entry.
  const KernelEntry& set_default(KernelEntry entry);
  /// The entry for `signature`, else the default, else throws ka::NotImplementedError
  /// "kernel not found for <signature> on <device>" (listing what is registered).
  [[nodiscard]] const KernelEntry& find(std::string_view signature) const;
  /// As find(), but nullptr instead of throwing and no default.
  [[nodiscard]] const KernelEntry* find_exact(std::string_view signature) const;
  /// Every registered signature, sorted.
  [[nodiscard]] std::vector<std::string> signatures() const;
  [[nodiscard]] DeviceType device() const noexcept { return device_; }

 private:
  DeviceType device_;
  mutable std::mutex mutex_;
  std::map<std::string, std::unique_ptr<KernelEntry>, std::less<>> entries_;
  std::unique_ptr<KernelEntry> default_;
  mutable std::vector<std::string> warned_;
};

}  // namespace ka::extractor
