// Suite files are bounded before anything is allocated (issue 21 item 3): a case whose tensors
// exceed the memory limit, a shape whose element count overflows int64 and a graph beyond the
// node limit are refused with the file, line and limit.
#include <ka/core/error.hpp>
#include <ka/core/memory_limit.hpp>
#include <ka/harness/suite.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace ka::harness {
namespace {
namespace fs = std::filesystem;

// Writes `text` to a scratch file, loads it with `limits` and returns the error ("" if none).
std::string load_error(const std::string& name, const std::string& text, SuiteLimits limits = {}) {
  const fs::path p = fs::temp_directory_path() / ("ka_suite_bounds_" + name + ".yaml");
  std::ofstream(p) << text;
  std::string error;
  try {
    load_suite_file(p.string(), limits);
  } catch (const ValueError& e) {
    error = e.what();
  }
  fs::remove(p);
  return error;
}

std::string op_suite(const std::string& mkn) {
  return "suite: s\ngroups:\n  - model: m\n    cases:\n      - {name: a, op: aten::mm, M: 1, K: 1, N: 1}\n"
         "      - {name: b, op: aten::mm, " + mkn + "}\n";
}

// A graph case: relu of one input of shape `shape`, after `adds` chained adds.
std::string graph_suite(const std::string& shape, int adds) {
  std::string ir = "    graph(%x : Tensor):\n      %one : int = prim::Constant[value=1]()\n";
  std::string last = "%x";
  for (int i = 0; i < adds; ++i) {
    ir += "      %a" + std::to_string(i) + " : Tensor = aten::add(" + last + ", %x, %one)\n";
    last = "%a" + std::to_string(i);
  }
  ir += "      %y : Tensor = aten::relu(" + last + ")\n      return (%y)\n";
  return "suite: g\ngraphs:\n  g: |\n" + ir +
         "groups:\n  - model: m\n    cases:\n      - {name: c, graph: g, inputs: {x: " + shape + "}}\n";
}

TEST(SuiteBounds, CaseTensorBytesCountOperandsAndBothOutputs) {
  SuiteCase mm;
  mm.op = "aten::mm";
  mm.m = 2;
  mm.k = 3;
  mm.n = 4;
  // A 2x3, B 3x4, ka's and libtorch's C 2x4: 6 + 12 + 8 + 8 floats.
  EXPECT_EQ(case_tensor_bytes(mm), 34U * 4U);
  SuiteCase addmm = mm;
  addmm.op = "aten::addmm";
  EXPECT_EQ(case_tensor_bytes(addmm), 38U * 4U);  // and the bias, N floats
  SuiteCase g;
  g.graph = "g";
  g.inputs = {{"x", {5, 64}, InputFill::kRandn}, {"w", {64}, InputFill::kRandn}};
  EXPECT_EQ(case_tensor_bytes(g), (320U + 64U) * 4U);
  g.inputs.push_back({"huge", {1 << 24, 1 << 24, 1 << 24, 1 << 24}, InputFill::kRandn});
  EXPECT_EQ(case_tensor_bytes(g), UINT64_MAX);  // saturates
}

TEST(SuiteBounds, ACaseBeyondTheMemoryLimitIsRefusedWithItsSizeAndTheLimit) {
  SuiteLimits limits;
  limits.case_bytes = 1000;
  // M = K = N = 10: 4 * 100 floats = 1600 bytes.
  const std::string e = load_error("mem", op_suite("M: 10, K: 10, N: 10"), limits);
  EXPECT_NE(e.find("ka_suite_bounds_mem.yaml:6: case 'b' needs 1.6 KiB (1600 bytes) of tensors, "
                   "more than the limit of 1000.0 B (1000 bytes)"),
            std::string::npos)
      << e;
  limits.case_bytes = 1600;
  EXPECT_EQ(load_error("mem_fits", op_suite("M: 10, K: 10, N: 10"), limits), "");
  // Graph inputs count too: 2 x 1000 floats.
  limits.case_bytes = 7999;
  EXPECT_NE(load_error("mem_graph", graph_suite("[2, 1000]", 0), limits)
                .find(":11: case 'c' needs 7.8 KiB (8000 bytes) of tensors"),
            std::string::npos);
}

TEST(SuiteBounds, TheDefaultLimitIsPartOfThisMachinesMemory) {
  const std::uint64_t limit = memory_limit_bytes();
  const auto physical = static_cast<std::uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                        static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  EXPECT_GT(limit, 0U);
  EXPECT_LE(limit, physical / 4 * 3);
  // 2^24-sized operands: 4 x 2^48 floats, 4 PiB, beyond any machine.
  const std::string e = load_error("mem_default", op_suite("M: 16777216, K: 16777216, N: 16777216"));
  EXPECT_NE(e.find(":6: case 'b' needs 4.0 PiB (4503599627370496 bytes) of tensors, more than the "
                   "limit of "),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("(three quarters of the memory available now)"), std::string::npos) << e;
}

TEST(SuiteBounds, AShapeWhoseElementCountOverflowsInt64IsRefused) {
  const std::string e =
      load_error("overflow", graph_suite("[16777216, 16777216, 16777216, 16777216]", 0));
  EXPECT_NE(e.find("ka_suite_bounds_overflow.yaml:11: the element count of input 'x' overflows "
                   "int64 (limit 9223372036854775807)"),
            std::string::npos)
      << e;
  // A zero size makes the count 0, however large the others: not an overflow.
  EXPECT_EQ(load_error("zero", graph_suite("[0, 16777216, 16777216, 16777216]", 0)), "");
  // Within int64 but beyond one input's 2^31 elements.
  EXPECT_NE(load_error("big_input", graph_suite("[65536, 65536]", 0))
                .find(":11: input 'x' has 4294967296 elements, more than the limit of 2^31"),
            std::string::npos);
}

TEST(SuiteBounds, AGraphBeyondTheNodeLimitIsRefused) {
  SuiteLimits limits;
  limits.graph_nodes = 10;
  // prim::Constant, 8 adds, relu: 10 nodes.
  EXPECT_EQ(load_error("nodes_at_limit", graph_suite("[4]", 8), limits), "");
  const std::string e = load_error("nodes", graph_suite("[4]", 9), limits);
  // The case is on line 11 + 9 (one line per add).
  EXPECT_NE(e.find("ka_suite_bounds_nodes.yaml:20: graph 'g' (line 3) has 11 nodes, more than "
                   "the limit of 10"),
            std::string::npos)
      << e;
  EXPECT_EQ(SuiteLimits{}.graph_nodes, kMaxGraphNodes);
}

}  // namespace
}  // namespace ka::harness
