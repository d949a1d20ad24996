#include <ka/profiler/detail/cupti_records.hpp>

#include <cxxabi.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

namespace ka::profiler::detail {

const char* memcpy_kind_name(std::uint32_t copy_kind) noexcept {
  switch (copy_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
      return "HtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
      return "AtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
      return "AtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
      return "AtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
      return "DtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return "HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return "PtoP";
    default:
      return "unknown";
  }
}

std::string demangle(const char* name) {
  if (name == nullptr) return "<unnamed>";
  int status = 0;
  const std::unique_ptr<char, void (*)(void*)> out(
      abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(name);
}

namespace {
// The fields every timed record (kernel, memcpy, memset) has.
template <class Record>
GpuActivity activity_of(const Record& r, GpuActivityKind kind, std::string name) {
  GpuActivity a;
  a.kind = kind;
  a.name = std::move(name);
  a.start_ns = r.start;
  a.end_ns = r.end;
  a.correlation_id = r.correlationId;
  a.stream = r.streamId;
  a.device = r.deviceId;
  return a;
}
}  // namespace

void ActivityParser::consume(const CUpti_Activity& record) {
  switch (record.kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto& k = reinterpret_cast<const KernelRecord&>(record);
      // CUPTI owns the name's storage only until the buffer is released: copy it now.
      activities_.push_back(activity_of(k, GpuActivityKind::kKernel, demangle(k.name)));
      return;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto& m = reinterpret_cast<const MemcpyRecord&>(record);
      GpuActivity a = activity_of(m, GpuActivityKind::kMemcpy,
                                  std::string("memcpy ") + memcpy_kind_name(m.copyKind));
      a.bytes = m.bytes;
      activities_.push_back(std::move(a));
      return;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto& m = reinterpret_cast<const MemsetRecord&>(record);
      GpuActivity a = activity_of(m, GpuActivityKind::kMemset, "memset");
      a.bytes = m.bytes;
      activities_.push_back(std::move(a));
      return;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
      const auto& e = reinterpret_cast<const ExternalCorrelationRecord&>(record);
      // Other tools (e.g. a framework's own profiler) may push ids of other kinds.
      if (e.externalKind != kTaskCorrelationKind) {
        ++ignored_;
        return;
      }
      task_of_[e.correlationId] = e.externalId;
      return;
    }
    default:
      ++ignored_;
      return;
  }
}

std::vector<GpuActivity> ActivityParser::take() {
  std::vector<GpuActivity> out = std::exchange(activities_, {});
  join_task_ids(out, task_of_);
  return out;
}

void ActivityParser::clear() {
  activities_.clear();
  task_of_.clear();
  ignored_ = 0;
}

void join_task_ids(std::vector<GpuActivity>& activities,
                   const std::unordered_map<std::uint32_t, std::uint64_t>& task_of) {
  for (GpuActivity& a : activities) {
    const auto it = task_of.find(a.correlation_id);
    if (it != task_of.end()) a.task_id = it->second;
  }
}

}  // namespace ka::profiler::detail
