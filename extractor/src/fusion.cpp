#include <ka/extractor/fusion.hpp>

#include <algorithm>
#include <string>

namespace ka::extractor {

const char* to_string(FusionKind kind) noexcept {
  switch (kind) {
    case FusionKind::kNone:
      return "none";
    case FusionKind::kElementwiseChain:
      return "ew_chain";
    case FusionKind::kGemmEpilogue:
      return "gemm_epilogue";
    case FusionKind::kPointwiseReduction:
      return "pointwise_reduction";
  }
  return "?";
}

FusionChecker::Budget FusionChecker::budget(DeviceType device) const {
  return device == DeviceType::kCUDA ? cuda_ : cpu_;
}

void FusionChecker::set_budget(DeviceType device, Budget b) {
  (device == DeviceType::kCUDA ? cuda_ : cpu_) = b;
}

namespace {
// True when node j reads node j-1's output and nothing else reads it.
bool chained(const std::vector<FusionNode>& nodes, std::size_t j) {
  return j > 0 && nodes[j].chain_input == static_cast<int>(j - 1) && nodes[j - 1].uses == 1;
}
}  // namespace

std::vector<FusionGroup> FusionChecker::plan(const std::vector<FusionNode>& nodes,
                                             DeviceType device) const {
  const Budget b = budget(device);
  std::vector<FusionGroup> groups;
  std::size_t i = 0;
  while (i < nodes.size()) {
    const FusionNode& n = nodes[i];
    FusionGroup g;
    g.first = static_cast<int>(i);
    if (n.gemm && i + 1 < nodes.size() && nodes[i + 1].activation && chained(nodes, i + 1)) {
      g.kind = FusionKind::kGemmEpilogue;
      g.count = 2;
      g.reason = n.signature + " feeds only " + nodes[i + 1].signature +
                 ": activation applied to each output tile";
    } else if (n.elementwise) {
      std::size_t j = i;
      int inputs = n.external_inputs;
      while (j + 1 < nodes.size() && nodes[j + 1].elementwise && chained(nodes, j + 1) &&
             static_cast<int>(j + 1 - i) < b.max_chain_ops &&
             inputs + nodes[j + 1].external_inputs <= b.max_inputs) {
        ++j;
        inputs += nodes[j].external_inputs;
      }
      const std::size_t r = j + 1;
      if (r < nodes.size() && nodes[r].row_reduction && chained(nodes, r) &&
          nodes[r].row_bytes <= b.row_working_set_bytes) {
        g.kind = FusionKind::kPointwiseReduction;
        g.count = static_cast<int>(r - i + 1);
        g.reason = std::to_string(r - i) + " element-wise op(s) evaluated as the prologue of " +
                   nodes[r].signature + " (row working set " + std::to_string(nodes[r].row_bytes) +
                   " B within " + std::to_string(b.row_working_set_bytes) + " B)";
      } else if (j > i) {
        g.kind = FusionKind::kElementwiseChain;
        g.count = static_cast<int>(j - i + 1);
        g.reason = std::to_string(j - i + 1) + " element-wise ops, each feeding only the next: one pass";
      }
      if (r < nodes.size() && nodes[r].row_reduction && chained(nodes, r) &&
          nodes[r].row_bytes > b.row_working_set_bytes && g.reason.empty()) {
        g.reason = "not fused into " + nodes[r].signature + ": row working set " +
                   std::to_string(nodes[r].row_bytes) + " B exceeds the budget";
      }
    }
    groups.push_back(g);
    i += static_cast<std::size_t>(g.count);
  }
  return groups;
}

}  // namespace ka::extractor
