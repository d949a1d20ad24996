// The extraction state machine, the launch-config cache and the built-in kernel registrations.
#include "graph_fusion.hpp"
#include "packed_weights.hpp"
#include <ka/extractor/detail/ops.hpp>

#include <ka/core/error.hpp>
#include <ka/core/logging.hpp>
#include <ka/executor/cuda_executor.hpp>
#include <ka/extractor/extractor.hpp>
#include <ka/extractor/tensor_interop.hpp>
#include <ka/kernels/attention.hpp>
#include <ka/kernels/builtin.hpp>
#include <ka/kernels/elementwise.hpp>
#include <ka/kernels/gemm.hpp>
#include <ka/kernels/reduction.hpp>
#include <ka/profiler/span.hpp>

#include <ATen/EmptyTensor.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <optional>
#include <shared_mutex>
#include <unordered_map>

namespace ka::extractor {

const char* to_string(Stage stage) noexcept {
  switch (stage) {
    case Stage::kValidate:
      return "validate";
    case Stage::kFusion:
      return "fusion";
    case Stage::kLookup:
      return "lookup";
    case Stage::kPack:
      return "pack";
    case Stage::kConfigure:
      return "configure";
    case Stage::kSubmit:
      return "submit";
  }
  return "?";
}

std::string_view OpHandle::signature() const noexcept {
  return spec_ == nullptr ? std::string_view() : std::string_view(spec_->signature);
}

namespace {

using detail::GroupArgs;
using detail::NodeArgs;
using detail::OpKind;
using detail::OpSpec;
using detail::Packed;

// ---- built-in kernels -----------------------------------------------------------------------

template <class Args, Status (*Prepare)(const Args&, const LaunchConfig&, kernels::CpuLaunch&)>
Status prepare_cpu(const void* args, const LaunchConfig& config, kernels::CpuLaunch& launch) {
  return Prepare(*static_cast<const Args*>(args), config, launch);
}
template <class Args, Status (*Launch)(const Args&, const LaunchConfig&, void*)>
Status launch_cuda(const void* args, const LaunchConfig& config, void* stream) {
  return Launch(*static_cast<const Args*>(args), config, stream);
}

// A kernel entry point `Fn` over packed arguments of type Args.
template <class Args, auto Fn, class... Rest>
auto with_args(const void* args, Rest... rest) {
  return Fn(*static_cast<const Args*>(args), rest...);
}

struct Family {
  kernels::OpFamily family;
  KernelLaunchers cpu;
  KernelLaunchers cuda;
};

Family family_of(OpKind kind) {
  using namespace kernels;
  switch (kind) {
    case OpKind::kElementwise:
      return {OpFamily::kElementwise,
              {&prepare_cpu<ElementwiseArgs, &prepare_elementwise_f32_cpu>, nullptr},
              {nullptr, &launch_cuda<ElementwiseArgs, &elementwise_f32_cuda>}};
    case OpKind::kGemm:
      return {OpFamily::kGemm,
              {&prepare_cpu<AddmmArgs, &prepare_gemm_f32_cpu>, nullptr,
               &with_args<AddmmArgs, &gemm_f32_cpu_mat2_layout>,
               &with_args<AddmmArgs, &pack_gemm_f32_cpu_mat2>},
              {nullptr, &launch_cuda<AddmmArgs, &gemm_f32_cuda>}};
    case OpKind::kBmm:
      return {OpFamily::kBmm,
              {&prepare_cpu<BmmArgs, &prepare_bmm_f32_cpu>, nullptr},
              {nullptr, &launch_cuda<BmmArgs, &bmm_f32_cuda>}};
    case OpKind::kSoftmax:
      return {OpFamily::kSoftmax,
              {&prepare_cpu<SoftmaxArgs, &prepare_softmax_f32_cpu>, nullptr},
              {nullptr, &launch_cuda<SoftmaxArgs, &softmax_f32_cuda>}};
    case OpKind::kLayerNorm:
      return {OpFamily::kLayerNorm,
              {&prepare_cpu<LayerNormArgs, &prepare_layer_norm_f32_cpu>, nullptr},
              {nullptr, &launch_cuda<LayerNormArgs, &layer_norm_f32_cuda>}};
    case OpKind::kSum:
      return {OpFamily::kSum,
              {&prepare_cpu<SumArgs, &prepare_sum_f32_cpu>, nullptr},
              {nullptr, &launch_cuda<SumArgs, &sum_f32_cuda>}};
    case OpKind::kAttention:
      return {OpFamily::kAttention,
              {&prepare_cpu<AttentionArgs, &prepare_attention_f32_cpu>, nullptr},
              {nullptr, nullptr}};
    case OpKind::kMaskedFill:
    case OpKind::kIdentityCast:
      break;  // no kernel of its own: runs_only_fused

  }
  KA_ASSERT(false, "unknown op family");
  return {};
}

struct PatternSpec {
  const char* signature;
  OpKind kind;
};
constexpr PatternSpec kPatterns[] = {
    {"fused::ew_chain", OpKind::kElementwise},
    {"fused::gemm_epilogue", OpKind::kGemm},
    {"fused::pointwise_softmax", OpKind::kSoftmax},
    {"fused::pointwise_layer_norm", OpKind::kLayerNorm},
    {"fused::attention", OpKind::kAttention},
};

void register_builtin(KernelRegistry& registry) {
  const bool cuda = registry.device() == DeviceType::kCUDA;
  auto add = [&](const char* signature, OpKind kind) {
    if (kind == OpKind::kMaskedFill || kind == OpKind::kIdentityCast) return;  // runs_only_fused
    const Family f = family_of(kind);
    if (!kernels::has_builtin_kernel(f.family, registry.device())) return;
    registry.add({signature, registry.device(),
                  &kernels::builtin_kernel(f.family, registry.device()), cuda ? f.cuda : f.cpu,
                  false});
  };
  for (const OpSpec& s : detail::op_specs()) add(s.signature, s.kind);
  for (const PatternSpec& p : kPatterns) add(p.signature, p.kind);
}

// The registry signature of a group: the op's own, or its fusion pattern's.
const char* group_signature(const GroupArgs& g) {
  switch (g.kind) {
    case FusionKind::kNone:
      return g.nodes[0].spec->signature;
    case FusionKind::kElementwiseChain:
      return "fused::ew_chain";
    case FusionKind::kGemmEpilogue:
      return "fused::gemm_epilogue";
    case FusionKind::kPointwiseReduction:
      return g.nodes[g.count - 1].spec->kind == OpKind::kSoftmax ? "fused::pointwise_softmax"
                                                                   : "fused::pointwise_layer_norm";
    case FusionKind::kAttention:
      return "fused::attention";
  }
  return "";
}

// ---- config cache -------------------------------------------------------------------------

// Note [Config cache]
// Resolving a config means building a ShapeKey (strings), asking the table and running the
// kernel's heuristic: microseconds. Eager calls repeat shapes, so the answer is cached under
// the "material" of the key — kernel entry, lookup op, and every key tensor's dtype, sizes and
// contiguity — hashed into 64 bits and compared in full on every hit. A thread-local direct-
// mapped front (64 slots) answers repeats without a lock; the shared map behind it takes a
// shared lock. Replacing the table bumps a generation that invalidates both; old entries are
// kept (tasks in flight point at their configs).
// Config generations are drawn from one process-wide counter.
std::uint64_t next_generation() {
  static std::atomic<std::uint64_t> counter{1};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

struct CachedConfig {
  LaunchConfig config;
  db::Provenance provenance = db::Provenance::kHeuristic;
  std::string shape_key;
  std::string config_text;  ///< config.str(), for TaskPlans (formatted once, not per run)
  std::string kernel;
  int kernel_version = 0;
  std::uint64_t generation = 0;
  std::vector<std::int64_t> material;
};

constexpr std::size_t kMaxMaterial = 4 + Packed::kMaxKeyViews * (3 + kernels::TensorView::kMaxDims);

std::size_t build_material(const KernelEntry& entry, const Packed& p, std::int64_t* m) {
  std::size_t n = 0;
  m[n++] = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(&entry));
  m[n++] = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(p.lookup_op));
  m[n++] = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(p.key_op));
  m[n++] = p.num_key_views;
  for (int i = 0; i < p.num_key_views; ++i) {
    const kernels::TensorView& v = p.key_views[static_cast<std::size_t>(i)];
    m[n++] = static_cast<std::int64_t>(v.dtype);
    m[n++] = v.ndim;
    m[n++] = v.is_contiguous() ? 1 : v.is_transposed() ? 2 : 0;
    for (int d = 0; d < v.ndim; ++d) m[n++] = v.size(d);
  }
  return n;
}

std::uint64_t hash_material(const std::int64_t* m, std::size_t n) {
  std::uint64_t h = 1469598103934665603ULL;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= static_cast<std::uint64_t>(m[i]);
    h *= 1099511628211ULL;
    h ^= h >> 29;
  }
  return h;
}

ShapeKey shape_key_of(const Packed& p) {
  std::vector<TensorSpec> specs;
  specs.reserve(static_cast<std::size_t>(p.num_key_views));
  for (int i = 0; i < p.num_key_views; ++i) {
    const kernels::TensorView& v = p.key_views[static_cast<std::size_t>(i)];
    specs.push_back({v.dtype, std::vector<std::int64_t>(v.sizes.begin(), v.sizes.begin() + v.ndim),
                     v.is_contiguous(), v.is_transposed()});
  }
  return ShapeKey(p.key_op, std::move(specs));
}

// The ExtractionContext of this thread's last request (op or graph nodes, device, stage
// reached, kernel, config with provenance, MemRanges, task plans, error), for
// dump_extraction_context(). Eager calls
// record only pointers and ranges (cheap); the JSON is built when asked.
struct ExtractionContext {
  bool graph = false;
  const OpSpec* op = nullptr;
  Device device;
  Stage stage = Stage::kValidate;
  bool ok = false;
  std::string error;
  const KernelEntry* entry = nullptr;
  const CachedConfig* config = nullptr;
  std::array<MemRange, Packed::kMaxRanges> ranges{};
  int num_ranges = 0;
  bool strided = false;
  bool plan_hit = false;  ///< Served by an eager plan (Note [Eager plans]): no ranges recorded.
  std::vector<TaskPlan> plans;
  std::vector<std::string> signatures;
};
thread_local ExtractionContext t_last;

// A kernel that refuses the configuration chosen for it (prepare or launch returned not ok):
// nothing can run, and the error says which kernel, shape and config.
void require_accepted(const Status& st, const KernelEntry& entry, const CachedConfig& cfg) {
  KA_CHECK_TYPE(NotImplementedError, st.is_ok(), entry.descriptor->name, " cannot run ",
                cfg.shape_key, " with ", cfg.config.str(), ": ", st.reason());
}

ParamBuffer& eager_buffer() {
  thread_local ParamBuffer buffer;
  return buffer;
}

// Note [Eager plans]
// Element-wise eager calls repeat the same shapes, so everything that depends only on the
// arguments' metadata is kept in a thread-local plan: the packed ElementwiseArgs (program with
// its scalars, broadcast strides), the config, and the CpuLaunch prepared against the plan's
// own copy of the arguments. A repeat call compares the metadata (op, dtype/sizes/strides/
// device of every tensor argument, which arguments alias, the scalars' bits, the value of a
// 0-dim CPU tensor that is not float32), allocates the
// output, patches the data pointers and runs the prepared grid. Only the kernel's job reads the
// data pointers (through the args pointer), so patching them is all a repeat needs. A plan is
// keyed by the extractor and the config generation, so a new table rebuilds it.
struct EagerPlan {
  static constexpr std::size_t kMaxMaterial = 64;
  const OpSpec* spec = nullptr;
  const void* owner = nullptr;
  std::uint64_t generation = 0;
  std::uint64_t hash = 0;
  std::array<std::int64_t, kMaxMaterial> material{};
  std::size_t material_size = 0;
  kernels::ElementwiseArgs args;
  kernels::CpuLaunch launch;
  const KernelEntry* entry = nullptr;
  const CachedConfig* config = nullptr;
  std::array<std::int8_t, kernels::EwProgram::kMaxInputs> input_arg{};  // op argument per input
  std::array<std::int64_t, kernels::TensorView::kMaxDims> out_sizes{};
  int out_ndim = 0;
  bool inplace = false;
};

// The metadata an eager element-wise call is planned on; false when the call is not eligible
// (a non-number scalar, more than 8 dims, too much material).
bool eager_material(const OpSpec& spec, const c10::IValue* args, std::size_t n,
                    std::array<std::int64_t, EagerPlan::kMaxMaterial>& m, std::size_t& size) {
  std::size_t k = 0;
  m[k++] = spec.id;
  for (std::size_t i = 0; i < n; ++i) {
    const c10::IValue& v = args[i];
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (!t.defined() || t.dim() > kernels::TensorView::kMaxDims) return false;
      const auto nd = static_cast<std::size_t>(t.dim());
      if (k + 4 + 2 * nd > m.size()) return false;
      std::int64_t alias = static_cast<std::int64_t>(i);
      for (std::size_t j = 0; j < i; ++j) {
        if (args[j].isTensor() && args[j].toTensor().unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) {
          alias = static_cast<std::int64_t>(j);
          break;
        }
      }
      const c10::Device d = t.device();
      m[k++] = (static_cast<std::int64_t>(t.scalar_type()) << 32) |
               (static_cast<std::int64_t>(d.type()) << 16) | (d.index() & 0xff);
      m[k++] = alias;
      m[k++] = static_cast<std::int64_t>(nd);
      const auto sizes = t.sizes();
      const auto strides = t.strides();
      for (std::size_t a = 0; a < nd; ++a) m[k++] = sizes[a];
      for (std::size_t a = 0; a < nd; ++a) m[k++] = strides[a];
      m[k++] = -7;  // separator
      // A 0-dim operand of another type may be a scalar of the program (Note [0-dim operands
      // as scalars]): its value is part of the plan.
      if (nd == 0 && t.is_cpu() && t.scalar_type() != at::kFloat) {
        const at::ScalarType type = t.scalar_type();
        if (!at::isFloatingType(type) && !at::isIntegralType(type, /*includeBool=*/true)) {
          return false;
        }
        if (k + 1 > m.size()) return false;
        const double value = t.item<double>();
        std::memcpy(&m[k++], &value, sizeof value);
      }
    } else if (v.isDouble() || v.isInt() || v.isBool()) {
      if (k + 2 > m.size()) return false;
      const double d = v.isDouble() ? v.toDouble() : v.isInt() ? static_cast<double>(v.toInt())
                                                                : (v.toBool() ? 1.0 : 0.0);
      std::int64_t bits = 0;
      std::memcpy(&bits, &d, sizeof bits);
      m[k++] = -3;
      m[k++] = bits;
    } else {
      return false;
    }
  }
  size = k;
  return true;
}

std::array<std::unique_ptr<EagerPlan>, 16>& eager_plans() {
  thread_local std::array<std::unique_ptr<EagerPlan>, 16> plans;
  return plans;
}

// Keeps what the slow path just extracted as the plan for repeats (Note [Eager plans]).
void remember_plan(std::unique_ptr<EagerPlan>& slot, EagerPlan* reuse, const void* owner,
                   const OpSpec& spec, const c10::IValue* args, const Packed& packed,
                   const KernelEntry& entry, const CachedConfig& cfg,
                   const std::array<std::int64_t, EagerPlan::kMaxMaterial>& material,
                   std::size_t material_size, std::uint64_t hash) {
  if (packed.device.type != DeviceType::kCPU || entry.launchers.prepare_cpu == nullptr) return;
  EagerPlan* p = reuse;
  if (p == nullptr) {
    slot = std::make_unique<EagerPlan>();
    p = slot.get();
  }
  p->spec = nullptr;  // invalid until complete
  p->args = *static_cast<const kernels::ElementwiseArgs*>(packed.args);
  // Kernel inputs are numbered by first appearance of each tensor in argument order.
  int next = 0;
  std::array<const c10::TensorImpl*, kernels::EwProgram::kMaxInputs> seen{};
  for (const std::int8_t a : spec.tensor_args) {
    if (a < 0) continue;
    const c10::TensorImpl* impl = args[a].toTensor().unsafeGetTensorImpl();
    bool dup = false;
    for (int i = 0; i < next; ++i) dup = dup || seen[static_cast<std::size_t>(i)] == impl;
    if (!dup) {
      seen[static_cast<std::size_t>(next)] = impl;
      p->input_arg[static_cast<std::size_t>(next++)] = a;
    }
  }
  if (next != p->args.program.inputs) return;  // not the layout we expect: no plan
  p->inplace = spec.inplace;
  p->out_ndim = p->args.out.ndim;
  for (int d = 0; d < p->out_ndim; ++d) p->out_sizes[static_cast<std::size_t>(d)] = p->args.out.size(d);
  if (!entry.launchers.prepare_cpu(&p->args, cfg.config, p->launch).is_ok()) return;
  p->entry = &entry;
  p->config = &cfg;
  p->owner = owner;
  p->generation = cfg.generation;
  p->hash = hash;
  p->material = material;
  p->material_size = material_size;
  p->spec = &spec;
}

[[noreturn]] void rethrow_in_stage(const std::string& prefix, Stage stage) {
  const std::string where = prefix + to_string(stage) + ": ";
  try {
    throw;
  } catch (const NotImplementedError& e) {
    throw NotImplementedError(where + e.what(), e.where());
  } catch (const ValueError& e) {
    throw ValueError(where + e.what(), e.where());
  } catch (const c10::Error& e) {
    throw ValueError(where + e.what_without_backtrace());
  }
}

}  // namespace

struct Extractor::Impl {
  KernelRegistry cpu{DeviceType::kCPU};
  KernelRegistry cuda{DeviceType::kCUDA};
  // entry cache per op spec and device type (filled on first use).
  std::array<std::atomic<const KernelEntry*>, detail::kNumOps> cpu_entries{};
  std::array<std::atomic<const KernelEntry*>, detail::kNumOps> cuda_entries{};

  // One table per device type (a CPU's and a GPU's tuned rows have different fingerprints).
  mutable std::shared_mutex table_mutex;
  std::array<std::shared_ptr<const db::RecommendationTable>, 2> tables{
      std::make_shared<const db::RecommendationTable>(),
      std::make_shared<const db::RecommendationTable>()};
  static std::size_t table_slot(DeviceType t) { return t == DeviceType::kCUDA ? 1 : 0; }
  std::shared_ptr<const db::RecommendationTable> table(DeviceType t) const {
    std::shared_lock<std::shared_mutex> lock(table_mutex);
    return tables[table_slot(t)];
  }
  // Unique across every Extractor of the process (see next_generation), so thread-local plans
  // and cache slots of a destroyed extractor can never match a new one at the same address.
  std::atomic<std::uint64_t> generation{next_generation()};

  mutable std::shared_mutex cache_mutex;
  std::unordered_map<std::uint64_t, std::vector<std::unique_ptr<CachedConfig>>> cache;
  std::vector<std::unique_ptr<CachedConfig>> retired;

  std::mutex cuda_mutex;
  std::unique_ptr<executor::CudaExecutor> cuda_executor;

  KernelRegistry& registry(DeviceType t) { return t == DeviceType::kCUDA ? cuda : cpu; }

  const KernelEntry& entry_for(const OpSpec& spec, Device device) {
    auto& slots = device.type == DeviceType::kCUDA ? cuda_entries : cpu_entries;
    auto& slot = slots[static_cast<std::size_t>(spec.id)];
    if (log().should_log(spdlog::level::trace)) {
      log().trace("kernel lookup: {} on {}", spec.signature, device.str());
    }
    if (const KernelEntry* e = slot.load(std::memory_order_acquire)) return *e;
    if (device.type != DeviceType::kCPU && device.type != DeviceType::kCUDA) {
      KA_THROW(NotImplementedError, "kernel not found for ", spec.signature, " on ", device.str());
    }
    const KernelEntry& e = registry(device.type).find(spec.signature);
    if (!e.is_default) slot.store(&e, std::memory_order_release);
    return e;
  }

  const CachedConfig& config_for(const KernelEntry& entry, const Packed& p) {
    std::array<std::int64_t, kMaxMaterial> m{};
    const std::size_t n = build_material(entry, p, m.data());
    const std::uint64_t h = hash_material(m.data(), n);
    const std::uint64_t gen = generation.load(std::memory_order_acquire);
    struct Slot {
      std::uint64_t hash = 0;
      const CachedConfig* config = nullptr;
      const Impl* owner = nullptr;
    };
    thread_local std::array<Slot, 64> front{};
    Slot& s = front[h & 63U];
    auto matches = [&](const CachedConfig* c) {
      return c->generation == gen && c->material.size() == n &&
             std::memcmp(c->material.data(), m.data(), n * sizeof(std::int64_t)) == 0;
    };
    if (s.hash == h && s.owner == this && s.config != nullptr && matches(s.config)) {
      return *s.config;
    }
    {
      std::shared_lock<std::shared_mutex> lock(cache_mutex);
      if (const auto it = cache.find(h); it != cache.end()) {
        for (const auto& c : it->second) {
          if (matches(c.get())) {
            s = {h, c.get(), this};
            return *c;
          }
        }
      }
    }
    auto fresh = resolve(entry, p, gen);
    fresh->material.assign(m.begin(), m.begin() + static_cast<std::ptrdiff_t>(n));
    std::unique_lock<std::shared_mutex> lock(cache_mutex);
    auto& bucket = cache[h];
    bucket.push_back(std::move(fresh));
    s = {h, bucket.back().get(), this};
    return *bucket.back();
  }

  // The slow path: table (exact → nearest → arch default) or the kernel's heuristic.
  std::unique_ptr<CachedConfig> resolve(const KernelEntry& entry, const Packed& p,
                                        std::uint64_t gen) {
    auto c = choose(*entry.descriptor, p.lookup_op, shape_key_of(p));
    c->config_text = c->config.str();
    c->generation = gen;
    return c;
  }

  // A tuned CPU config runs on at most kernels::cpu_thread_limit() threads: the limit is the
  // program's choice (ka-bench --threads, KA_NUM_THREADS), the heuristic plans for it, and a
  // table tuned on more cores must not exceed it.
  static void cap_threads(const kernels::KernelDescriptor& d, LaunchConfig& config) {
    const int limit = kernels::cpu_thread_limit();
    if (d.device != DeviceType::kCPU || config.get_or("threads", 1) <= limit) return;
    log().debug("{}: tuned threads={} capped at the thread limit {}", d.name,
                config.get_or("threads", 1), limit);
    config.set("threads", limit);
  }

  // The slow path: table (exact → nearest → arch default) or the kernel's heuristic.
  std::unique_ptr<CachedConfig> choose(const kernels::KernelDescriptor& d,
                                       std::string_view lookup_op, const ShapeKey& key) {
    auto c = std::make_unique<CachedConfig>();
    c->kernel = d.name;
    c->kernel_version = d.version;
    c->shape_key = key.str();
    const std::shared_ptr<const db::RecommendationTable> t = table(d.device);
    if (t->size() > 0) {
      if (auto pick = t->lookup(lookup_op, key)) {
        if (!pick->kernel.empty() && pick->kernel != d.name) {
          log().info("table entry for {} names kernel {}, but {} serves it here: not used",
                     key.str(), pick->kernel, d.name);
        } else {
          const LaunchConfig full = d.complete ? d.complete(key, *pick->config) : *pick->config;
          const Status st = d.can_run ? d.can_run(key, full) : Status::ok();
          if (st) {
            c->config = full;
            c->provenance = pick->provenance;
            cap_threads(d, c->config);
            log().debug("config for {} from the table ({}): {}", key.str(), db::to_string(c->provenance),
                        c->config.str());
            return c;
          }
          log().warn("tuned config {} for {} cannot run it ({}): using the heuristic",
                     full.str(), key.str(), st.reason());
        }
      }
    }
    KA_CHECK_TYPE(NotImplementedError, static_cast<bool>(d.default_config), "kernel ", d.name,
                  " has no default configuration");
    c->config = d.default_config(key);
    c->provenance = db::Provenance::kHeuristic;
    log().debug("config for {} from {}'s heuristic: {}", key.str(), d.name, c->config.str());
    return c;
  }

  executor::CudaExecutor& cuda_exec(Device device) {
    std::lock_guard<std::mutex> lock(cuda_mutex);
    if (!cuda_executor) cuda_executor = std::make_unique<executor::CudaExecutor>(device);
    return *cuda_executor;
  }
};

Extractor::Extractor() : impl_(std::make_unique<Impl>()) {
  register_builtin(impl_->cpu);
  if (kernels::cuda_compiled()) register_builtin(impl_->cuda);
  cpu_executor_ = std::make_unique<executor::CpuExecutor>(0);
}

Extractor::~Extractor() = default;

Extractor& Extractor::global() {
  static Extractor* extractor = new Extractor();  // never destroyed, like the dispatcher
  return *extractor;
}

OpHandle Extractor::resolve(std::string_view signature) const {
  const OpSpec* spec = detail::find_spec(signature);
  KA_CHECK_TYPE(NotImplementedError, spec != nullptr, "kernel not found for ", signature,
                " on any device: ka extracts ", [] {
                  std::string s;
                  for (const auto& o : supported_ops()) s += (s.empty() ? "" : ", ") + o;
                  return s;
                }());
  return OpHandle(spec);
}

std::vector<std::string> Extractor::supported_ops() {
  std::vector<std::string> out;
  for (const OpSpec& s : detail::op_specs()) out.emplace_back(s.signature);
  std::sort(out.begin(), out.end());
  return out;
}

KernelRegistry& Extractor::registry(DeviceType device) { return impl_->registry(device); }

Extractor::Choice Extractor::choose_config(const kernels::KernelDescriptor& kernel,
                                           std::string_view lookup_op,
                                           const ShapeKey& key) const {
  const auto c = impl_->choose(kernel, lookup_op, key);
  return {c->config, c->provenance};
}

db::KernelVersions Extractor::kernel_versions() const {
  db::KernelVersions versions;
  for (const KernelRegistry* r : {&impl_->cpu, &impl_->cuda}) {
    for (const std::string& sig : r->signatures()) {
      const kernels::KernelDescriptor& d = *r->find(sig).descriptor;
      versions[d.name] = d.version;
    }
  }
  return versions;
}
const KernelRegistry& Extractor::registry(DeviceType device) const {
  return device == DeviceType::kCUDA ? impl_->cuda : impl_->cpu;
}

void Extractor::set_table(std::shared_ptr<const db::RecommendationTable> table,
                          DeviceType device) {
  KA_CHECK(table != nullptr, "Extractor::set_table: null table");
  std::unique_lock<std::shared_mutex> lock(impl_->table_mutex);
  impl_->tables[Impl::table_slot(device)] = std::move(table);
  std::unique_lock<std::shared_mutex> cache_lock(impl_->cache_mutex);
  for (auto& [h, bucket] : impl_->cache) {
    for (auto& c : bucket) impl_->retired.push_back(std::move(c));
  }
  impl_->cache.clear();
  impl_->generation.store(next_generation(), std::memory_order_release);
}

std::shared_ptr<const db::RecommendationTable> Extractor::table(DeviceType device) const {
  return impl_->table(device);
}

// Note [Eager path]
// One op, run before returning: no fusion, no queue. The kernel entry is cached per op, the
// arguments are packed into a thread-local ParamBuffer (reset per call: the task finishes
// before the next call on this thread can reuse it), the config comes from the config cache,
// and the executor runs the grid inline (or on the pool for multi-block work). The only heap
// allocation is the output tensor.
c10::IValue Extractor::call(OpHandle op, const c10::IValue* args, std::size_t num_args) {
  return eager(op, args, num_args, true);
}

c10::IValue Extractor::extract_only(OpHandle op, const c10::IValue* args, std::size_t num_args) {
  return eager(op, args, num_args, false);
}

c10::IValue Extractor::eager(OpHandle op, const c10::IValue* args, std::size_t num_args,
                             bool run) {
  KA_CHECK(op.valid(), "Extractor::call: invalid OpHandle");
  const OpSpec& spec = *op.spec();
  ExtractionContext& last = t_last;
  last.graph = false;
  last.op = &spec;
  last.ok = false;
  last.entry = nullptr;
  last.config = nullptr;
  last.num_ranges = 0;
  last.plan_hit = false;
  Stage stage = Stage::kValidate;
  Device device;
  // Spans (DESIGN.md §6): "extract" until the task is assembled, then "execute".
  std::optional<profiler::ScopedSpan> extract_span;
  extract_span.emplace("extract");
  try {
    KA_CHECK(num_args == static_cast<std::size_t>(spec.num_args), "expected ", spec.num_args,
             " arguments, got ", num_args);
    // See Note [Eager plans].
    std::array<std::int64_t, EagerPlan::kMaxMaterial> material;
    std::size_t material_size = 0;
    EagerPlan* plan_slot_owner = nullptr;
    std::unique_ptr<EagerPlan>* plan_slot = nullptr;
    std::uint64_t plan_hash = 0;
    if (spec.kind == OpKind::kElementwise &&
        eager_material(spec, args, num_args, material, material_size)) {
      plan_hash = hash_material(material.data(), material_size);
      plan_slot = &eager_plans()[plan_hash & 15U];
      EagerPlan* p = plan_slot->get();
      if (p != nullptr && p->hash == plan_hash && p->owner == this && p->spec == &spec &&
          p->generation == impl_->generation.load(std::memory_order_acquire) &&
          p->material_size == material_size &&
          std::memcmp(p->material.data(), material.data(), material_size * sizeof(std::int64_t)) == 0) {
        at::Tensor out;
        if (p->inplace) {
          out = args[0].toTensor();
        } else {
          const std::int64_t* sz = p->out_sizes.data();
          out = at::detail::empty_cpu(c10::IntArrayRef(sz, static_cast<std::size_t>(p->out_ndim)),
                                      at::kFloat, false, c10::MemoryFormat::Contiguous);
        }
        p->args.out.data = out.data_ptr();
        for (int i = 0; i < p->args.program.inputs; ++i) {
          p->args.inputs[static_cast<std::size_t>(i)].data =
              args[static_cast<std::size_t>(p->input_arg[static_cast<std::size_t>(i)])].toTensor().data_ptr();
        }
        last.entry = p->entry;
        last.config = p->config;
        last.plan_hit = true;
        last.device = Device::cpu();
        extract_span.reset();
        if (run) {
          KA_SPAN("execute");
          kernels::run_on_pool(p->launch);  // inline for one block or one thread
        }
        last.stage = Stage::kSubmit;
        last.ok = true;
        return c10::IValue(std::move(out));
      }
      plan_slot_owner = p;
    }
    std::array<const c10::IValue*, 8> ptrs{};
    for (std::size_t i = 0; i < num_args; ++i) ptrs[i] = &args[i];
    const NodeArgs node{&spec, ptrs.data(), static_cast<int>(num_args), -1, detail::kAllArgsFixed};
    const GroupArgs group{FusionKind::kNone, &node, 1};
    device = detail::group_device(group);
    last.device = device;
    stage = Stage::kLookup;
    const KernelEntry& entry = impl_->entry_for(spec, device);
    last.entry = &entry;
    stage = Stage::kPack;
    ParamBuffer& buffer = eager_buffer();
    buffer.reset();
    Packed packed;
    detail::pack_group(group, buffer, packed);
    last.ranges = packed.ranges;
    last.num_ranges = packed.num_ranges;
    last.strided = packed.strided;
    if (packed.strided && log().should_log(spdlog::level::debug)) {
      log().debug("{}: non-contiguous input, the strided variant of {} runs (no copy)",
                  spec.signature, entry.descriptor->name);
    }
    stage = Stage::kConfigure;
    const CachedConfig& cfg = impl_->config_for(entry, packed);
    last.config = &cfg;
    stage = Stage::kSubmit;
    if (device.type == DeviceType::kCPU) {
      executor::KernelTask task;
      task.kernel = entry.descriptor;
      task.device = device;
      task.config = &cfg.config;
      const Status st = entry.launchers.prepare_cpu(packed.args, cfg.config, task.cpu);
      require_accepted(st, entry, cfg);
      extract_span.reset();
      if (run) {
        KA_SPAN("execute");
        cpu_executor_->run_now(task);
      }
      if (plan_slot != nullptr && packed.family == OpKind::kElementwise) {
        remember_plan(*plan_slot, plan_slot_owner, this, spec, args, packed, entry, cfg,
                      material, material_size, plan_hash);
      }
    } else if (run) {
      extract_span.reset();
      KA_SPAN("execute");
      KA_CHECK_TYPE(NotImplementedError, entry.launchers.launch_cuda != nullptr, "kernel ",
                    entry.descriptor->name, " has no CUDA launcher");
      const Status st = entry.launchers.launch_cuda(packed.args, cfg.config, nullptr);
      require_accepted(st, entry, cfg);
    }
    last.stage = stage;
    last.ok = true;
    return c10::IValue(std::move(packed.result));
  } catch (...) {
    last.stage = stage;
    try {
      rethrow_in_stage(std::string(spec.signature) + " on " + device.str() + ": ", stage);
    } catch (const std::exception& e) {
      last.error = e.what();
      throw;
    }
  }
}

// ---- graphs ---------------------------------------------------------------------------------

namespace {

// Note [Error context built on failure]
// A graph run names the node it is at in any error ("aten::mm (node 3) on cpu: pack: ..."),
// but nearly every run raises none, so the position keeps the parts (a signature that
// outlives the run, the node, the device) and where() formats them only when an error is
// being reported. Formatting them for every node and group cost a few allocations each, on
// every run.
//
// Where a graph extraction is, for its errors: the stage and the node or group at hand.
struct GraphPosition {
  Stage stage = Stage::kValidate;
  const char* signature = nullptr;  // null: no node (between nodes, or a fallback's own)
  std::int64_t node = -1;
  std::optional<Device> device;

  void at(const char* sig, std::int64_t index, std::optional<Device> on = std::nullopt) {
    signature = sig;
    node = index;
    device = on;
  }
  void clear() { at(nullptr, -1); }
  // "aten::mm (node 3) on cpu: ", or "" between nodes.
  [[nodiscard]] std::string where() const {
    if (signature == nullptr) return "";
    std::string w = std::string(signature) + " (node " + std::to_string(node) + ")";
    if (device) w += " on " + device->str();
    return w + ": ";
  }
};

// Checks every node before anything is extracted: a kernel for its signature or a fallback,
// its arity, a single output for ka's nodes, value indices in range. Returns each node's
// OpSpec (null for a node only its fallback can run) and records the signatures for
// dump_extraction_context().
std::vector<const OpSpec*> validate_graph(const OpGraph& graph, GraphPosition& at,
                                          std::vector<std::string>& signatures) {
  at.stage = Stage::kValidate;
  const auto in_range = [&](int v) {
    return v >= 0 && static_cast<std::size_t>(v) < graph.values.size();
  };
  std::vector<const OpSpec*> specs(graph.nodes.size());
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    const OpGraph::Node& node = graph.nodes[i];
    signatures.push_back(node.signature);
    at.at(node.signature.c_str(), static_cast<std::int64_t>(i));
    for (int v : node.inputs) KA_CHECK(in_range(v), "input value ", v, " out of range");
    for (int v : node.outputs) KA_CHECK(in_range(v), "output value ", v, " out of range");
    const OpSpec* spec = detail::find_spec(node.signature);
    const bool ka_can_run = spec != nullptr &&
                            node.inputs.size() == static_cast<std::size_t>(spec->num_args) &&
                            node.outputs.size() == 1;
    if (ka_can_run) {
      specs[i] = spec;
      continue;
    }
    KA_CHECK_TYPE(NotImplementedError, spec != nullptr || node.fallback, "kernel not found for ",
                  node.signature, " on any device");
    KA_CHECK(node.fallback, "expected ", spec->num_args, " arguments and 1 output, got ",
             node.inputs.size(), " and ", node.outputs.size());
  }
  at.clear();
  for (int v : graph.outputs) KA_CHECK(in_range(v), "graph output value ", v, " out of range");
  return specs;
}

// The device whose fusion budget applies: the one of the graph's first tensor.
DeviceType budget_device(const OpGraph& graph) {
  for (const c10::IValue& v : graph.values) {
    if (v.isTensor() && v.toTensor().defined()) {
      return v.toTensor().is_cuda() ? DeviceType::kCUDA : DeviceType::kCPU;
    }
  }
  return DeviceType::kCPU;
}

std::vector<FusionGroup> one_group_per_node(std::size_t n) {
  std::vector<FusionGroup> groups;
  for (std::size_t i = 0; i < n; ++i) groups.push_back({FusionKind::kNone, static_cast<int>(i), 1, ""});
  return groups;
}

// One extracted group: its task, ready to submit, and the plan --explain shows.
struct ExtractedTask {
  executor::KernelTask task;
  TaskPlan plan;
};

// What a task keeps alive until it has run: its packed arguments.
struct TaskState {
  ParamBuffer buffer;
  Packed packed;
  at::Tensor packed_mat2;  ///< a constant weight packed once, which the kernel's args point into
};

// Hands a CPU GEMM whose mat2 is a run constant that weight packed once, in the layout its
// config packs in (Note [Constant weights packed once]).
void attach_packed_weight(const KernelEntry& entry, const LaunchConfig& config, TaskState& state) {
  const Packed::ConstantMat2& constant = state.packed.constant_mat2;
  const KernelLaunchers& run = entry.launchers;
  if (constant.slot == nullptr || run.mat2_layout_cpu == nullptr || run.pack_mat2_cpu == nullptr) {
    return;
  }
  const std::optional<kernels::PackedMat2Layout> layout = run.mat2_layout_cpu(state.packed.args, config);
  if (!layout) return;
  const void* args = state.packed.args;
  state.packed_mat2 = detail::packed_weight(constant.owner, constant.view, *layout,
                                            [&](float* out) { run.pack_mat2_cpu(args, *layout, out); });
  if (state.packed_mat2.defined()) *constant.slot = {state.packed_mat2.data_ptr<float>(), *layout};
}

// "fused::ew_chain[aten::mul.Tensor+aten::add.Tensor]" for a fused group, the signature for
// a single op.
std::string pattern_of(const FusionGroup& g, const std::vector<const OpSpec*>& specs,
                       const char* group_signature) {
  if (g.kind == FusionKind::kNone) return specs[static_cast<std::size_t>(g.first)]->signature;
  std::string pattern = std::string(group_signature) + "[";
  for (int k = 0; k < g.count; ++k) {
    pattern += (k ? "+" : "");
    pattern += specs[static_cast<std::size_t>(g.first + k)]->signature;
  }
  return pattern + "]";
}

// Note [Final data while extracting]
// A value holds its final data while the graph is extracted when it is a graph input or
// constant, or a fallback that ran during extraction made it: a view of final data, a
// factory (aten::full, prim::NumToTensor of a size: it reads no tensor), a data fallback
// that read only final data, or any value that holds no tensor (an int, a list of ints). A
// task's output never does until the task has run. That holds only where no node writes an
// argument (OpGraph::writes_arguments false): an in-place or out= write, possibly through a
// view, would change data after it was read. Two things follow. A data fallback that reads
// only final data runs during extraction, with no wait: a traced model's size arithmetic
// (`v.size(-1) ** 0.5` is NumToTensor -> pow -> ScalarImplicit -> full) no longer waits for
// every task before it, each time. And a 0-dim operand made that way is fixed while packing
// (NodeArgs::fixed_args), so it can be attention's scale or a scalar operand (Notes [Scale by
// a 0-dim tensor], [0-dim operands as scalars]).

// Note [Graph extraction]
// Every group is extracted (looked up, packed, configured, its grid prepared) before any
// task runs, in graph order, so each group's result tensor exists when a later group packs
// it as an argument. A fused group the tuned table measured as slower than its parts
// ('unfused') is extracted node by node instead.
class GraphExtraction {
 public:
  GraphExtraction(Extractor::Impl& impl, OpGraph& graph, const std::vector<const OpSpec*>& specs,
                  GraphPosition& at)
      : impl_(impl), graph_(graph), specs_(specs), at_(at) {
    // Graph inputs and constants (values no node makes) hold their data while extracting.
    const std::vector<bool> made = detail::made_by_nodes(graph);
    final_.resize(made.size());
    for (std::size_t v = 0; v < made.size(); ++v) final_[v] = !made[v];
    for (const OpGraph::Node& node : graph.nodes) {
      auto& ptrs = arg_ptrs_.emplace_back();
      std::uint32_t constant = 0;
      for (int v : node.inputs) {
        const auto value = static_cast<std::size_t>(v);
        if (ptrs.size() < 32 && !made[value] && value < graph.run_constants.size() &&
            graph.run_constants[value]) {
          constant |= 1U << ptrs.size();
        }
        ptrs.push_back(&graph.values[value]);
      }
      constant_args_.push_back(constant);
    }
  }

  /// Per value of the graph: whether it holds its final data now, while extracting (Note
  /// [Final data while extracting]).
  [[nodiscard]] const std::vector<bool>& final_data() const { return final_; }
  [[nodiscard]] bool holds_final_data(int value) const {
    return final_[static_cast<std::size_t>(value)];
  }
  void mark_final(int value) { final_[static_cast<std::size_t>(value)] = true; }

  // Extracts group g (node indices absolute; `view` the fusion view of its run) onto `out`.
  // Throws, leaving `out` as it was, when a kernel refuses it.
  void extract(const FusionGroup& g, const detail::GraphFusionView& view,
               std::vector<ExtractedTask>& out) {
    std::vector<NodeArgs> nodes;
    for (int k = 0; k < g.count; ++k) {
      const auto i = static_cast<std::size_t>(g.first + k);
      nodes.push_back({specs_[i], arg_ptrs_[i].data(), static_cast<int>(arg_ptrs_[i].size()),
                       k == 0 ? -1 : view.link_arg[i - view.begin], fixed_args_of(i),
                       constant_args_[i]});
    }
    const GroupArgs group{g.kind, nodes.data(), g.count};
    const char* signature = group_signature(group);
    at_.at(specs_[static_cast<std::size_t>(g.first)]->signature, g.first);
    at_.stage = Stage::kLookup;
    KA_CHECK_TYPE(NotImplementedError,
                  group.kind != FusionKind::kNone || !detail::runs_only_fused(*nodes[0].spec),
                  nodes[0].spec->signature, ": ka runs it only inside a fused attention");
    const Device device = detail::group_device(group);
    at_.at(signature, g.first, device);
    const KernelEntry& entry = impl_.registry(device.type).find(signature);
    at_.stage = Stage::kPack;
    auto state = std::make_shared<TaskState>();
    detail::pack_group(group, state->buffer, state->packed);
    if (measured_unfused(g, device, state->packed)) {
      const std::size_t before = out.size();
      try {
        for (int k = 0; k < g.count; ++k) {
          extract({FusionKind::kNone, g.first + k, 1,
                   std::string("not fused: the tuned table measured ") +
                       state->packed.lookup_op + " as slower than its ops"},
                  view, out);
        }
      } catch (...) {
        out.resize(before);
        throw;
      }
      return;
    }
    at_.stage = Stage::kConfigure;
    const CachedConfig& cfg = impl_.config_for(entry, state->packed);
    if (device.type == DeviceType::kCPU) attach_packed_weight(entry, cfg.config, *state);
    at_.stage = Stage::kSubmit;
    ExtractedTask ex;
    ex.task = make_task(entry, device, cfg, *state, signature);
    // The group's last node's output is its result; fused intermediates never materialise.
    const int result = graph_.nodes[static_cast<std::size_t>(g.first + g.count - 1)].outputs[0];
    graph_.values[static_cast<std::size_t>(result)] = state->packed.result;
    ex.plan = plan_of(g, entry, device, cfg, signature);
    if (state->packed.strided) {
      log().debug("{}: non-contiguous input, the strided variant of {} runs", ex.plan.pattern,
                  ex.plan.kernel);
    }
    ex.task.params = std::move(state);
    out.push_back(std::move(ex));
  }

  // NodeArgs::fixed_args of node i: its arguments that hold their final data now.
  [[nodiscard]] std::uint32_t fixed_args_of(std::size_t i) const {
    const std::vector<int>& inputs = graph_.nodes[i].inputs;
    std::uint32_t fixed = 0;
    for (std::size_t a = 0; a < inputs.size() && a < 32; ++a) {
      if (holds_final_data(inputs[a])) fixed |= 1U << a;
    }
    return fixed;
  }

 private:
  // True when the tuned table's measured decision for this fused group is "unfused".
  bool measured_unfused(const FusionGroup& g, Device device, const Packed& packed) const {
    if (g.kind == FusionKind::kNone) return false;
    const auto table = impl_.table(device.type);
    if (table->size() == 0) return false;
    const auto pick = table->lookup(packed.lookup_op, shape_key_of(packed));
    if (!pick || pick->fusion != "unfused") return false;
    log().debug("{}: the table's measured decision is 'unfused'", packed.lookup_op);
    return true;
  }

  static executor::KernelTask make_task(const KernelEntry& entry, Device device,
                                        const CachedConfig& cfg, const TaskState& state,
                                        const char* label) {
    const Packed& packed = state.packed;
    executor::KernelTask task;
    task.kernel = entry.descriptor;
    task.device = device;
    task.config = &cfg.config;
    task.ranges.assign(packed.ranges.begin(), packed.ranges.begin() + packed.num_ranges);
    task.label = label;
    if (device.type == DeviceType::kCPU) {
      require_accepted(entry.launchers.prepare_cpu(packed.args, cfg.config, task.cpu), entry, cfg);
    } else {
      const KernelEntry* e = &entry;
      const LaunchConfig* c = &cfg.config;
      const void* a = packed.args;
      task.cuda_launch = [e, c, a](void* stream) {
        const Status st = e->launchers.launch_cuda(a, *c, stream);
        KA_CHECK_TYPE(NotImplementedError, st.is_ok(), e->descriptor->name, ": ", st.reason());
      };
    }
    return task;
  }

  TaskPlan plan_of(const FusionGroup& g, const KernelEntry& entry, Device device,
                   const CachedConfig& cfg, const char* signature) const {
    TaskPlan plan;
    plan.pattern = pattern_of(g, specs_, signature);
    for (int k = 0; k < g.count; ++k) plan.nodes.push_back(g.first + k);
    plan.fusion = g.reason;
    plan.kernel = entry.descriptor->name;
    plan.kernel_version = entry.descriptor->version;
    plan.device = device.str();
    plan.shape_key = cfg.shape_key;
    plan.config = cfg.config_text;
    plan.provenance = cfg.provenance;
    return plan;
  }

  Extractor::Impl& impl_;
  OpGraph& graph_;
  const std::vector<const OpSpec*>& specs_;
  GraphPosition& at_;
  std::vector<std::vector<const c10::IValue*>> arg_ptrs_;
  std::vector<std::uint32_t> constant_args_;  // per node: NodeArgs::constant_args
  std::vector<bool> final_;                   // per value: holds its final data now
};

// CPU tasks go to the executor in one batch (their MemRanges order them), CUDA tasks to the
// device's stream; waits for both, fills in task ids and dependencies and appends the plans
// to `plans`. Leaves `tasks` empty.
void submit_and_wait(Extractor::Impl& impl, executor::CpuExecutor& cpu,
                     std::vector<ExtractedTask>& tasks, std::vector<TaskPlan>& plans) {
  const std::size_t first = plans.size();
  std::vector<executor::KernelTask> cpu_tasks;
  std::vector<std::size_t> cpu_plan;
  bool any_cuda = false;
  for (ExtractedTask& ex : tasks) {
    if (ex.task.device.type == DeviceType::kCPU) {
      cpu_plan.push_back(plans.size());
      cpu_tasks.push_back(std::move(ex.task));
    } else {
      any_cuda = true;
      ex.plan.task_id = impl.cuda_exec(ex.task.device).submit(std::move(ex.task));
    }
    plans.push_back(std::move(ex.plan));
  }
  tasks.clear();
  const std::vector<std::uint64_t> ids = cpu.run_batch(std::move(cpu_tasks));
  for (std::size_t i = 0; i < ids.size(); ++i) plans[cpu_plan[i]].task_id = ids[i];
  if (any_cuda) impl.cuda_exec(Device::cuda(0)).synchronize();
  for (std::size_t i = first; i < plans.size(); ++i) {
    TaskPlan& p = plans[i];
    p.dependencies = p.device == "cpu" ? cpu.dependencies_of(p.task_id)
                                       : std::vector<std::uint64_t>{};
  }
}

// Appends the tensors `v` holds (lists and tuples looked into) to `to`.
void collect_tensors(const c10::IValue& v, std::vector<at::Tensor>& to) {
  if (v.isTensor()) {
    to.push_back(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorVector()) to.push_back(t);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) collect_tensors(e, to);
  } else if (v.isTuple()) {
    for (const c10::IValue& e : v.toTupleRef().elements()) collect_tensors(e, to);
  }
}

// Whether `v` holds a tensor (lists and tuples looked into).
bool holds_tensors(const c10::IValue& v) {
  if (v.isTensor()) return true;
  if (v.isList()) {
    const auto items = v.toListRef();
    return std::any_of(items.begin(), items.end(), holds_tensors);
  }
  if (v.isTuple()) {
    const auto& items = v.toTupleRef().elements();
    return std::any_of(items.begin(), items.end(), holds_tensors);
  }
  return v.isGenericDict() || v.isObject();  // not looked into: taken as holding one
}

// True when every tensor among `outputs` shares storage with a tensor among `inputs`, as a
// view's outputs do and a copy's do not; true as well when no input holds a tensor (the
// outputs were made from scalars, reading no data of the graph's).
bool outputs_alias_inputs(const std::vector<c10::IValue>& outputs,
                          const std::vector<c10::IValue>& inputs) {
  std::vector<at::Tensor> in;
  for (const c10::IValue& v : inputs) collect_tensors(v, in);
  if (in.empty()) return true;
  std::vector<at::Tensor> out;
  for (const c10::IValue& v : outputs) collect_tensors(v, out);
  return std::all_of(out.begin(), out.end(), [&](const at::Tensor& o) {
    return !o.defined() || std::any_of(in.begin(), in.end(), [&](const at::Tensor& i) {
      return i.defined() && (o.is_same(i) || o.is_alias_of(i));
    });
  });
}

// Note [Refusals remembered]
// A node ka's kernel refuses (a size computation's integer mul, a float64 op) is refused by a
// thrown NotImplementedError, caught and rethrown to name its stage, and unwinding through
// libtorch's frames costs more than the fallback itself, on every run. So a lowered graph
// keeps, per node (OpGraph::refusals), what it was last refused for: the key of an eager plan
// (Note [Eager plans]: the op, its tensors' types, sizes, strides, devices and aliasing, its
// scalars), which of its arguments held final data then, and the config generation, as the
// refusal may depend on each. A later run whose key is the same runs the fallback at once,
// with the same reason. A node whose key cannot be built (a list argument) is asked on every
// run.

// Note [Fallback nodes]
// A node ka has no kernel for, or whose arguments ka's kernel refuses, runs libtorch's own
// kernel: OpGraph::Node::fallback, a boxed call of its schema. The graph is extracted in
// order, one run of ka's nodes (a segment) at a time, each planned for fusion when it is
// reached, so the sizes of every value it reads from before it are known.
//  - A fallback that reads only metadata (Reads::kMetadata: a view, aten::size, list and
//    tuple glue) runs at once, during extraction: its inputs are allocated even where the
//    tasks that write their data have not run, and a view's outputs share its input's
//    storage, so the MemRanges of the tasks that read or write them describe the real
//    aliasing and the executor orders them. One whose outputs turn out not to alias its
//    inputs (reshape of a tensor no view can describe, contiguous of a strided one: a copy)
//    is run again as a data fallback.
//  - A fallback that reads data waits for every task extracted before it (they are submitted
//    and waited for), then runs on the calling thread, so that libtorch sees the caller's
//    grad and inference modes and thread-local state; unless every value it reads holds its
//    final data already (Note [Final data while extracting]): it then runs at once, as a
//    metadata fallback does.
// Every fallback runs on the calling thread, in graph order, whether during extraction or
// after a wait: random numbers are drawn in libtorch's order.
// A fused group's intermediate never materialises; the FusionChecker sees every reader,
// fallbacks included, so a value a fallback reads is never one. Errors: nothing runs before
// the first data fallback unless every node before it extracted; an error after it leaves
// what ran before it (in-place writes to inputs) done.
class GraphRun {
 public:
  GraphRun(Extractor::Impl& impl, executor::CpuExecutor& cpu, const FusionChecker& fusion,
           OpGraph& graph, const std::vector<const OpSpec*>& specs, const GraphOptions& options,
           GraphPosition& at)
      : impl_(impl),
        cpu_(cpu),
        fusion_(fusion),
        graph_(graph),
        specs_(specs),
        options_(options),
        at_(at),
        extraction_(impl, graph, specs, at) {}

  std::vector<TaskPlan> run() {
    std::size_t i = 0;
    const std::size_t n = graph_.nodes.size();
    while (i < n) {
      if (specs_[i] == nullptr) {
        run_fallback(i, "ka has no kernel for " + graph_.nodes[i].signature);
        ++i;
        continue;
      }
      std::size_t end = i;
      while (end < n && specs_[end] != nullptr) ++end;
      extract_segment(i, end);
      i = end;
    }
    drain();
    // Metadata fallbacks ran during extraction, before the tasks extracted ahead of them.
    std::stable_sort(plans_.begin(), plans_.end(), [](const TaskPlan& a, const TaskPlan& b) {
      return a.nodes.front() < b.nodes.front();
    });
    return std::move(plans_);
  }

 private:
  // Plans the fusion of nodes [begin, end), all ka's, and extracts each group; a group ka's
  // kernel refuses (NotImplementedError) is extracted node by node, and a node refused
  // alone runs its fallback, where it has one.
  void extract_segment(std::size_t begin, std::size_t end) {
    profiler::ScopedSpan span("extract");
    at_.stage = Stage::kFusion;
    const detail::GraphFusionView view =
        detail::fusion_view(graph_, specs_, begin, end, extraction_.final_data());
    std::vector<FusionGroup> groups =
        options_.fusion ? fusion_.plan(view.nodes, budget_device(graph_))
                        : one_group_per_node(end - begin);
    for (FusionGroup& g : groups) {
      g.first += static_cast<int>(begin);
      extract_or_fall_back(g, view);
    }
  }

  void extract_or_fall_back(const FusionGroup& g, const detail::GraphFusionView& view) {
    const auto first = static_cast<std::size_t>(g.first);
    if (g.count == 1 && detail::runs_only_fused(*specs_[first]) && graph_.nodes[first].fallback) {
      // Refused without a throw: a model may hold many casts that fuse nowhere.
      run_fallback(first, std::string("ka runs ") + specs_[first]->signature +
                              " only inside a fused attention");
      return;
    }
    std::vector<std::int64_t> key;
    if (g.count == 1 && first < graph_.refusals.size() &&
        !graph_.refusals[first].key.empty()) {  // Note [Refusals remembered]
      key = refusal_key(first);
      if (key == graph_.refusals[first].key) {
        run_fallback(first, graph_.refusals[first].reason);
        return;
      }
    }
    try {
      extraction_.extract(g, view, pending_);
      return;
    } catch (const NotImplementedError& e) {
      if (g.count == 1 && !graph_.nodes[first].fallback) throw;
      if (g.count == 1) {
        // Rethrown inside the stage: "graph: aten::mm (node 3) on cpu: pack: ...".
        std::string reason;
        try {
          rethrow_in_stage(at_.where(), at_.stage);
        } catch (const std::exception& staged) {
          reason = std::string("ka refused it: ") + staged.what();
        }
        log().debug("graph node {}: {}; libtorch runs it", first, reason);
        if (graph_.refusals.size() <= first) graph_.refusals.resize(first + 1);
        graph_.refusals[first] = {key.empty() ? refusal_key(first) : std::move(key), reason};
        run_fallback(first, std::move(reason));
        return;
      }
      log().debug("fused group at node {} refused ({}); its nodes are extracted one by one",
                  first, e.what());
    }
    for (int k = 0; k < g.count; ++k) {
      extract_or_fall_back({FusionKind::kNone, g.first + k, 1, ""}, view);
    }
  }

  // What node i's refusal depends on (Note [Refusals remembered]); empty where that is more
  // than its arguments' metadata and scalars can say (a list argument, too many dims).
  std::vector<std::int64_t> refusal_key(std::size_t i) const {
    const OpGraph::Node& node = graph_.nodes[i];
    std::vector<c10::IValue> args;
    args.reserve(node.inputs.size());
    for (int v : node.inputs) args.push_back(graph_.values[static_cast<std::size_t>(v)]);
    std::array<std::int64_t, EagerPlan::kMaxMaterial> material{};
    std::size_t size = 0;
    if (!eager_material(*specs_[i], args.data(), args.size(), material, size)) return {};
    std::vector<std::int64_t> key(material.begin(),
                                  material.begin() + static_cast<std::ptrdiff_t>(size));
    key.push_back(extraction_.fixed_args_of(i));
    key.push_back(static_cast<std::int64_t>(impl_.generation.load(std::memory_order_acquire)));
    return key;
  }

  // Runs node i's fallback: at once when it reads only metadata and its outputs alias its
  // inputs, else after every task before it has run. See Note [Fallback nodes].
  void run_fallback(std::size_t i, std::string reason) {
    OpGraph::Node& node = graph_.nodes[i];
    at_.stage = Stage::kSubmit;
    at_.clear();  // call_fallback names the node when it fails
    std::vector<c10::IValue> inputs;
    inputs.reserve(node.inputs.size());
    for (int v : node.inputs) inputs.push_back(graph_.values[static_cast<std::size_t>(v)]);
    TaskPlan plan;
    plan.task_id = next_fallback_id();
    plan.pattern = node.signature;
    plan.nodes = {static_cast<int>(i)};
    plan.kernel = "libtorch";
    plan.provenance = db::Provenance::kFallback;
    plan.fallback = std::move(reason);
    plan.device = device_of(inputs);
    if (options_.describe_fallbacks) plan.shape_key = describe(inputs);
    if (node.reads == OpGraph::Reads::kMetadata) {
      std::vector<c10::IValue> stack = inputs;
      {
        KA_SPAN("fallback", plan.task_id);
        call_fallback(i, stack);
      }
      if (outputs_alias_inputs(stack, inputs)) {
        store_outputs(node, std::move(stack), reads_final_data(node));
        plan.config = "metadata only: ran during extraction";
        plans_.push_back(std::move(plan));
        return;
      }
      log().debug("graph node {} ({}) copied instead of viewing: run again after its inputs",
                  i, node.signature);
    }
    const bool at_once = reads_final_data(node);
    if (!at_once) drain();
    std::vector<c10::IValue> stack = std::move(inputs);
    {
      KA_SPAN("fallback", plan.task_id);
      call_fallback(i, stack);
    }
    store_outputs(node, std::move(stack), true);
    plan.config = at_once ? "reads only final data: ran during extraction"
                          : "reads data: ran after every earlier task";
    plans_.push_back(std::move(plan));
  }

  // Whether every value node reads holds its final data now (Note [Final data while
  // extracting]); never where a node of the graph writes an argument.
  bool reads_final_data(const OpGraph::Node& node) const {
    if (graph_.writes_arguments) return false;
    return std::all_of(node.inputs.begin(), node.inputs.end(),
                       [&](int v) { return extraction_.holds_final_data(v); });
  }

  // Runs node i's fallback on `stack`; an error names the node (built only then: a fallback's
  // cost is per node and call).
  void call_fallback(std::size_t i, std::vector<c10::IValue>& stack) const {
    const OpGraph::Node& node = graph_.nodes[i];
    const auto where = [&] {
      return node.signature + " (node " + std::to_string(i) + ", libtorch's kernel): ";
    };
    try {
      node.fallback(stack);
    } catch (const c10::Error& e) {
      KA_THROW(ValueError, where(), "libtorch: ", e.what_without_backtrace());
    } catch (const ValueError& e) {
      KA_THROW(ValueError, where(), e.what());
    } catch (const NotImplementedError& e) {
      KA_THROW(NotImplementedError, where(), e.what());
    } catch (const std::exception& e) {
      KA_THROW(ValueError, where(), "libtorch: ", e.what());
    }
    KA_CHECK(stack.size() == node.outputs.size(), where(), "libtorch's kernel left ", stack.size(),
             " values, the node has ", node.outputs.size(), " outputs");
  }

  // Stores a fallback's outputs; `final_data`: they hold their final data (what a view of
  // data that is not final yet holds no tensor of is final too: sizes, ints, devices).
  void store_outputs(const OpGraph::Node& node, std::vector<c10::IValue> stack, bool final_data) {
    for (std::size_t k = 0; k < stack.size(); ++k) {
      const int out = node.outputs[k];
      if (!graph_.writes_arguments && (final_data || !holds_tensors(stack[k]))) {
        extraction_.mark_final(out);
      }
      graph_.values[static_cast<std::size_t>(out)] = std::move(stack[k]);
    }
  }

  static std::uint64_t next_fallback_id() {
    static std::atomic<std::uint64_t> next{1};
    return kFallbackTaskIds | next.fetch_add(1, std::memory_order_relaxed);
  }

  // "[1,128,768],[768],int": the inputs' shapes, tensors' sizes and other values' kinds.
  static std::string describe(const std::vector<c10::IValue>& inputs) {
    std::string s;
    for (const c10::IValue& v : inputs) {
      if (!s.empty()) s += ',';
      if (v.isTensor() && v.toTensor().defined()) {
        s += '[';
        const auto sizes = v.toTensor().sizes();
        for (std::size_t d = 0; d < sizes.size(); ++d) {
          s += (d ? "," : "") + std::to_string(sizes[d]);
        }
        s += ']';
      } else if (v.isInt()) {
        s += std::to_string(v.toInt());
      } else if (v.isIntList()) {
        s += '(';
        const c10::List<std::int64_t> items = v.toIntList();
        for (std::size_t k = 0; k < items.size(); ++k) s += (k ? "," : "") + std::to_string(items[k]);
        s += ')';
      } else if (v.isDouble()) {
        s += fmt::format("{:g}", v.toDouble());
      } else if (v.isBool()) {
        s += v.toBool() ? "True" : "False";
      } else {
        s += v.tagKind();
      }
    }
    return s;
  }

  static std::string device_of(const std::vector<c10::IValue>& inputs) {
    for (const c10::IValue& v : inputs) {
      if (v.isTensor() && v.toTensor().defined()) return v.toTensor().device().str();
    }
    return "cpu";
  }

  // Submits every extracted task and waits for them.
  void drain() {
    if (pending_.empty()) return;
    at_.stage = Stage::kSubmit;
    KA_SPAN("execute");
    submit_and_wait(impl_, cpu_, pending_, plans_);
  }

  Extractor::Impl& impl_;
  executor::CpuExecutor& cpu_;
  const FusionChecker& fusion_;
  OpGraph& graph_;
  const std::vector<const OpSpec*>& specs_;
  const GraphOptions& options_;
  GraphPosition& at_;
  GraphExtraction extraction_;
  std::vector<ExtractedTask> pending_;
  std::vector<TaskPlan> plans_;
};

}  // namespace

std::vector<TaskPlan> Extractor::run_graph(OpGraph& graph, const GraphOptions& options) {
  ExtractionContext& last = t_last;
  last = ExtractionContext{};
  last.graph = true;
  GraphPosition at;
  try {
    const std::vector<const OpSpec*> specs = validate_graph(graph, at, last.signatures);
    last.plans = GraphRun(*impl_, *cpu_executor_, fusion_, graph, specs, options, at).run();
    last.stage = at.stage;
    last.ok = true;
    return last.plans;
  } catch (...) {
    last.stage = at.stage;
    try {
      rethrow_in_stage("graph: " + at.where(), at.stage);
    } catch (const std::exception& e) {
      last.error = e.what();
      throw;
    }
  }
}

struct PreparedCall::State {
  ParamBuffer buffer;
  Packed packed;
  kernels::CpuLaunch launch;                // CPU calls: the prepared grid
  const KernelEntry* entry = nullptr;       // CUDA calls: the launcher
};

PreparedCall::PreparedCall() : state_(std::make_unique<State>()) {}
PreparedCall::~PreparedCall() = default;

void PreparedCall::run() const {
  KA_CHECK(status_.is_ok(), "PreparedCall::run: ", kernel_->name, " cannot run ", key_.str(),
           " with ", config_.str(), ": ", status_.reason());
  if (device_.type == DeviceType::kCUDA) {
    enqueue(nullptr);
    executor::cuda_stream_synchronize(nullptr, kernel_->name + " " + config_.str());
    return;
  }
  kernels::run_on_pool(state_->launch);
}

void PreparedCall::enqueue(void* stream) const {
  KA_CHECK(device_.type == DeviceType::kCUDA, "PreparedCall::enqueue: ", kernel_->name,
           " runs on ", device_.str(), ", not on a CUDA stream: use run()");
  KA_CHECK(status_.is_ok(), "PreparedCall::enqueue: ", kernel_->name, " cannot run ",
           key_.str(), " with ", config_.str(), ": ", status_.reason());
  const Status st = state_->entry->launchers.launch_cuda(state_->packed.args, config_, stream);
  KA_CHECK_TYPE(CudaError, st.is_ok(), kernel_->name, " ", key_.str(), " with ", config_.str(),
                " on ", device_.str(), ": ", st.reason());
}

c10::IValue PreparedCall::result() const { return c10::IValue(state_->packed.result); }

std::unique_ptr<PreparedCall> Extractor::prepare_call(OpHandle op, const c10::IValue* args,
                                                      std::size_t num_args,
                                                      const LaunchConfig* point) {
  KA_CHECK(op.valid(), "Extractor::prepare_call: invalid OpHandle");
  const OpSpec& spec = *op.spec();
  KA_CHECK(num_args == static_cast<std::size_t>(spec.num_args), spec.signature, ": expected ",
           spec.num_args, " arguments, got ", num_args);
  std::array<const c10::IValue*, 8> ptrs{};
  for (std::size_t i = 0; i < num_args; ++i) ptrs[i] = &args[i];
  const NodeArgs node{&spec, ptrs.data(), static_cast<int>(num_args), -1};
  const GroupArgs group{FusionKind::kNone, &node, 1};
  const Device device = detail::group_device(group);
  KA_CHECK_TYPE(NotImplementedError,
                device.type == DeviceType::kCPU || device.type == DeviceType::kCUDA,
                spec.signature, ": prepared calls run on the CPU or a CUDA device; the arguments "
                "are on ", device.str());
  const KernelEntry& entry = impl_->entry_for(spec, device);
  std::unique_ptr<PreparedCall> call(new PreparedCall());
  call->device_ = device;
  PreparedCall::State& st = *call->state_;
  st.entry = &entry;
  detail::pack_group(group, st.buffer, st.packed);
  const kernels::KernelDescriptor& d = *entry.descriptor;
  call->kernel_ = &d;
  call->key_ = shape_key_of(st.packed);
  call->lookup_op_ = st.packed.lookup_op;
  call->default_config_ = d.default_config(call->key_);
  if (point == nullptr) {
    call->config_ = call->default_config_;
  } else {
    if (Status s = d.space.check(*point); !s) {
      call->status_ = std::move(s);
      call->config_ = *point;
      return call;
    }
    call->config_ = d.complete ? d.complete(call->key_, *point) : *point;
  }
  if (d.can_run) {
    if (Status s = d.can_run(call->key_, call->config_); !s) {
      call->status_ = std::move(s);
      return call;
    }
  }
  // A CUDA call is checked when it is enqueued (the launcher validates against the device).
  if (device.type == DeviceType::kCPU) {
    call->status_ = entry.launchers.prepare_cpu(st.packed.args, call->config_, st.launch);
  }
  return call;
}

std::uint64_t Extractor::config_generation() const noexcept {
  return impl_->generation.load(std::memory_order_acquire);
}

bool Extractor::last_eager_plan(TaskPlan& plan) const {
  const ExtractionContext& last = t_last;
  if (last.graph || !last.ok || last.op == nullptr || last.entry == nullptr ||
      last.config == nullptr) {
    return false;
  }
  plan.pattern.assign(last.op->signature);
  plan.kernel.assign(last.entry->descriptor->name);
  plan.kernel_version = last.entry->descriptor->version;
  plan.device.assign(last.device.str());
  plan.shape_key.assign(last.config->shape_key);
  plan.config.assign(last.config->config_text);
  plan.provenance = last.config->provenance;
  return true;
}

std::string Extractor::dump_extraction_context() const {
  using nlohmann::json;
  const ExtractionContext& last = t_last;
  json j;
  j["kind"] = last.graph ? "graph" : "eager";
  j["stage"] = to_string(last.stage);
  j["ok"] = last.ok;
  if (!last.error.empty()) j["error"] = last.error;
  auto range_json = [](const MemRange& r) {
    return json{{"device", r.device.str()},
                {"base", r.base},
                {"bytes", r.bytes},
                {"access", r.access == Access::kRead    ? "read"
                           : r.access == Access::kWrite ? "write"
                                                        : "read_write"}};
  };
  if (!last.graph) {
    j["op"] = last.op ? last.op->signature : "";
    j["device"] = last.device.str();
    if (last.entry) {
      j["kernel"] = last.entry->descriptor->name;
      j["kernel_version"] = last.entry->descriptor->version;
      j["default_kernel"] = last.entry->is_default;
    }
    if (last.config) {
      j["shape_key"] = last.config->shape_key;
      j["config"] = last.config->config_text;
      j["provenance"] = db::to_string(last.config->provenance);
    }
    j["strided_inputs"] = last.strided;
    j["eager_plan"] = last.plan_hit ? "hit" : "miss";
    j["mem_ranges"] = json::array();
    for (int i = 0; i < last.num_ranges; ++i) {
      j["mem_ranges"].push_back(range_json(last.ranges[static_cast<std::size_t>(i)]));
    }
  } else {
    j["nodes"] = last.signatures;
    j["tasks"] = json::array();
    for (const TaskPlan& p : last.plans) {
      j["tasks"].push_back(json{{"task_id", p.task_id},
                                {"pattern", p.pattern},
                                {"nodes", p.nodes},
                                {"fusion", p.fusion},
                                {"kernel", p.kernel},
                                {"kernel_version", p.kernel_version},
                                {"device", p.device},
                                {"shape_key", p.shape_key},
                                {"config", p.config},
                                {"provenance", db::to_string(p.provenance)},
                                {"dependencies", p.dependencies}});
    }
  }
  return j.dump(2);
}

}  // namespace ka::extractor
