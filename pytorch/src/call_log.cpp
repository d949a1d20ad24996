// The call log: a table of (operator, shapes, dtypes) with counts, and a ring of the last
// calls.
//
// Note [Call log cost]
// Every served call is logged, so the per-call work is a hash of the arguments' dtypes, sizes
// and strides, one lock and a lookup. An entry's text is built when it is first seen, and what
// its calls ran (kernel, config, provenance) is read from the extractor again only when the
// extractor's config generation changed: within a generation one (operator, shapes, strides)
// always runs with the same configuration. Copying it on every call cost a fifth of a 1-element
// torch.add.
#include "call_log.hpp"

#include <ka/extractor/extractor.hpp>

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace ka::pytorch::detail {
namespace {

struct Entry {
  const char* op = nullptr;
  std::vector<std::vector<std::int64_t>> shapes;
  std::vector<std::string> dtypes;
  std::int64_t ka_calls = 0;
  std::int64_t fallback_calls = 0;
  extractor::TaskPlan plan;  ///< What its calls on ka run (Note [Call log cost]).
  bool has_plan = false;
  std::uint64_t plan_generation = 0;
  std::string reason;  ///< Why the first fallback fell back.
};

struct RingSlot {
  const Entry* entry = nullptr;
  bool on_ka = false;
  std::string reason;
};

constexpr std::size_t kRingSize = 64;

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

std::uint64_t key_of(const char* op, const c10::IValue* args, std::size_t n) {
  std::uint64_t h = mix(0, reinterpret_cast<std::uintptr_t>(op));
  for (std::size_t i = 0; i < n; ++i) {
    if (!args[i].isTensor()) continue;
    const at::Tensor& t = args[i].toTensor();
    if (!t.defined()) continue;
    h = mix(h, static_cast<std::uint64_t>(t.scalar_type()) * 64 + static_cast<std::uint64_t>(t.dim()));
    for (std::int64_t s : t.sizes()) h = mix(h, static_cast<std::uint64_t>(s));
    for (std::int64_t s : t.strides()) h = mix(h, static_cast<std::uint64_t>(s));
  }
  return h;
}

// The first line of an error, at most 300 characters: a view, so that a fallback's slot
// reuses its string's storage instead of allocating on every call.
std::string_view first_line(std::string_view text) {
  constexpr std::size_t kMax = 300;
  return text.substr(0, text.find('\n')).substr(0, kMax);
}

class CallLog {
 public:
  // Returns the entry for these arguments (`key`: key_of them), made on first sight. Caller
  // holds mutex_.
  Entry& entry(std::uint64_t key, const char* op, const c10::IValue* args, std::size_t n) {
    std::unique_ptr<Entry>& e = entries_[key];
    if (!e) {
      e = std::make_unique<Entry>();
      e->op = op;
      for (std::size_t i = 0; i < n; ++i) {
        if (!args[i].isTensor() || !args[i].toTensor().defined()) continue;
        const at::Tensor& t = args[i].toTensor();
        e->shapes.emplace_back(t.sizes().begin(), t.sizes().end());
        e->dtypes.emplace_back(c10::toString(t.scalar_type()));
      }
      order_.push_back(e.get());
    }
    return *e;
  }

  void ka_call(const char* op, const c10::IValue* args, std::size_t n) {
    const extractor::Extractor& ex = extractor::Extractor::global();
    const std::uint64_t generation = ex.config_generation();
    const std::uint64_t key = key_of(op, args, n);
    std::lock_guard<std::mutex> lock(mutex_);
    Entry& e = entry(key, op, args, n);
    ++e.ka_calls;
    next_slot(e, true);
    if (!e.has_plan || e.plan_generation != generation) {
      e.has_plan = ex.last_eager_plan(e.plan);
      e.plan_generation = generation;
    }
  }

  void fallback(const char* op, const c10::IValue* args, std::size_t n, std::string_view why) {
    const std::uint64_t key = key_of(op, args, n);
    std::lock_guard<std::mutex> lock(mutex_);
    Entry& e = entry(key, op, args, n);
    ++e.fallback_calls;
    RingSlot& slot = next_slot(e, false);
    slot.reason.assign(first_line(why));
    if (e.reason.empty()) e.reason = slot.reason;
  }

  std::string explain() const {
    std::lock_guard<std::mutex> lock(mutex_);
    nlohmann::json out = nlohmann::json::array();
    const std::size_t count = std::min(calls_, kRingSize);
    for (std::size_t i = calls_ - count; i < calls_; ++i) {
      const RingSlot& s = ring_[i % kRingSize];
      nlohmann::json j = common(*s.entry);
      j["served"] = s.on_ka ? "ka" : "fallback";
      if (!s.on_ka) {
        j["reason"] = s.reason;
      } else if (s.entry->has_plan) {
        add_plan(j, s.entry->plan);
      }
      out.push_back(std::move(j));
    }
    return out.dump();
  }

  std::string report() const {
    std::lock_guard<std::mutex> lock(mutex_);
    nlohmann::json out = nlohmann::json::array();
    for (const Entry* e : order_) {
      nlohmann::json j = common(*e);
      j["ka_calls"] = e->ka_calls;
      j["fallback_calls"] = e->fallback_calls;
      if (e->has_plan) add_plan(j, e->plan);
      if (!e->reason.empty()) j["reason"] = e->reason;
      out.push_back(std::move(j));
    }
    return out.dump();
  }

  void reset() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (RingSlot& s : ring_) s.entry = nullptr;
    calls_ = 0;
    order_.clear();
    entries_.clear();
  }

 private:
  RingSlot& next_slot(const Entry& e, bool on_ka) {
    RingSlot& slot = ring_[calls_++ % kRingSize];
    slot.entry = &e;
    slot.on_ka = on_ka;
    return slot;
  }
  static nlohmann::json common(const Entry& e) {
    return nlohmann::json{{"op", e.op}, {"shapes", e.shapes}, {"dtypes", e.dtypes}};
  }
  static void add_plan(nlohmann::json& j, const extractor::TaskPlan& p) {
    j["kernel"] = p.kernel;
    j["kernel_version"] = p.kernel_version;
    j["shape_key"] = p.shape_key;
    j["config"] = p.config;
    j["provenance"] = std::string(db::to_string(p.provenance));
  }

  mutable std::mutex mutex_;
  std::unordered_map<std::uint64_t, std::unique_ptr<Entry>> entries_;
  std::vector<const Entry*> order_;  ///< Entries in the order first seen.
  std::array<RingSlot, kRingSize> ring_{};
  std::size_t calls_ = 0;
};

CallLog& call_log() {
  static CallLog* log = new CallLog();  // never destroyed: calls may log during exit
  return *log;
}

}  // namespace

void record_ka_call(const char* op, const c10::IValue* args, std::size_t num_args) {
  call_log().ka_call(op, args, num_args);
}
void record_fallback(const char* op, const c10::IValue* args, std::size_t num_args,
                     std::string_view reason) {
  call_log().fallback(op, args, num_args, reason);
}
std::string explain_json() { return call_log().explain(); }
std::string report_json() { return call_log().report(); }
void reset_log() { call_log().reset(); }

}  // namespace ka::pytorch::detail
