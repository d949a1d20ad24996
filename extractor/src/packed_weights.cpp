#include "packed_weights.hpp"

#include <ka/core/logging.hpp>
#include <ka/core/option_checks.hpp>

#include <ATen/ops/empty.h>
#include <c10/util/intrusive_ptr.h>

#include <algorithm>
#include <mutex>
#include <vector>

namespace ka::extractor {

// Note [Constant weights packed once]
// The CPU GEMM packs its B operand into the micro-kernel's slivers on every call (Note [CPU
// GEMM blocking]): for a linear layer, whose B is its weight transposed, that is a strided
// transposing copy of the whole weight per call, a large share of the GEMM when M is a
// prefill's 128 tokens. A graph constant that every run reads unchanged (OpGraph::
// run_constants: a frozen module's weight, no node of the graph writing constant data) is
// packed once per layout the configurations ask for, and later extractions hand the kernel
// those floats (AddmmArgs::mat2_packed), which it reads exactly as it would have read its own
// packing: the results are bit for bit the same.
// An entry is reused only for the same tensor, unwritten since it was packed:
//  - it holds a weak reference to the constant's TensorImpl, so while the entry exists no
//    other tensor can live at that address, and the extractor, holding the constant, finds the
//    entry by that address;
//  - it records the constant's version counter; an in-place write (an optimizer step,
//    load_state_dict, copy_) bumps it and the weight is packed again. Inference tensors keep
//    no version counter, so they are never packed ahead.
// The entries take at most KA_PACKED_WEIGHTS_MIB (default 1 GiB): on a miss, entries whose
// tensor died or changed are dropped first; a weight that still does not fit is packed per call
// as before (counted as over_budget), rather than evicting weights another layer of the same
// model reuses on its next run. A task prepared with a packed weight holds its floats, so
// dropping an entry never frees memory a running GEMM reads.

namespace {

struct Entry {
  explicit Entry(const at::Tensor& t) : owner(t.getIntrusivePtr()), impl(t.unsafeGetTensorImpl()) {}
  c10::weak_intrusive_ptr<c10::TensorImpl> owner;
  const c10::TensorImpl* impl = nullptr;
  std::int64_t version = 0;
  const void* data = nullptr;  // mat2's first element, and its strides: which view was packed
  std::int64_t row_stride = 0;
  std::int64_t col_stride = 0;
  kernels::PackedMat2Layout layout;
  at::Tensor packed;
};

class PackedWeights {
 public:
  at::Tensor get(const at::Tensor& owner, const kernels::TensorView& view,
                 const kernels::PackedMat2Layout& layout, const std::function<void(float*)>& pack) {
    if (owner.is_inference()) return {};
    const std::int64_t version = owner._version();
    const std::lock_guard<std::mutex> lock(mutex_);
    for (const Entry& e : entries_) {
      if (e.impl == owner.unsafeGetTensorImpl() && e.version == version && e.data == view.data &&
          e.row_stride == view.stride(0) && e.col_stride == view.stride(1) && e.layout == layout) {
        ++stats_.reuses;
        return e.packed;
      }
    }
    drop_stale();
    const std::int64_t bytes = layout.floats() * static_cast<std::int64_t>(sizeof(float));
    if (stats_.bytes + bytes > budget_) {
      if (stats_.over_budget++ == 0) {
        log().info("constant weights packed once: KA_PACKED_WEIGHTS_MIB ({} MiB) is full; "
                   "further weights are packed on every call",
                   budget_ >> 20);
      }
      return {};
    }
    Entry e(owner);
    e.version = version;
    e.data = view.data;
    e.row_stride = view.stride(0);
    e.col_stride = view.stride(1);
    e.layout = layout;
    e.packed = at::empty({layout.floats()}, at::kFloat);
    pack(e.packed.data_ptr<float>());
    ++stats_.packs;
    stats_.bytes += bytes;
    entries_.push_back(std::move(e));
    return entries_.back().packed;
  }

  PackedWeightsStats stats() {
    const std::lock_guard<std::mutex> lock(mutex_);
    PackedWeightsStats s = stats_;
    s.entries = static_cast<std::int64_t>(entries_.size());
    s.budget_bytes = budget_;
    return s;
  }

  void clear() {
    const std::lock_guard<std::mutex> lock(mutex_);
    entries_.clear();
    stats_.bytes = 0;
  }

 private:
  // Drops the entries whose constant died or was written since it was packed.
  void drop_stale() {
    const auto stale = [](const Entry& e) {
      const c10::intrusive_ptr<c10::TensorImpl> alive = e.owner.lock();
      return !alive ||
             static_cast<std::int64_t>(alive->version_counter().current_version()) != e.version;
    };
    for (const Entry& e : entries_) {
      if (stale(e)) stats_.bytes -= e.layout.floats() * static_cast<std::int64_t>(sizeof(float));
    }
    entries_.erase(std::remove_if(entries_.begin(), entries_.end(), stale), entries_.end());
  }

  std::mutex mutex_;
  std::vector<Entry> entries_;
  PackedWeightsStats stats_;
  std::int64_t budget_ = env_packed_weights_bytes();
};

// Never destroyed: its tensors would otherwise be freed during static destruction, after
// libtorch's own globals may be gone.
PackedWeights& packed_weights() {
  static auto* store = new PackedWeights;
  return *store;
}

}  // namespace

PackedWeightsStats packed_weights_stats() { return packed_weights().stats(); }

void clear_packed_weights() { packed_weights().clear(); }

namespace detail {

at::Tensor packed_weight(const at::Tensor& owner, const kernels::TensorView& view,
                         const kernels::PackedMat2Layout& layout,
                         const std::function<void(float*)>& pack) {
  return packed_weights().get(owner, view, layout, pack);
}

}  // namespace detail
}  // namespace ka::extractor
