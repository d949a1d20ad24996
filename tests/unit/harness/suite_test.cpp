#include <ka/core/error.hpp>
#include <ka/harness/suite.hpp>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

namespace ka::harness {
namespace {
namespace fs = std::filesystem;

std::string write_temp(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / ("ka_suite_test_" + name + ".yaml");
  std::ofstream(p) << text;
  return p.string();
}

// Loads `text` and returns the error message (empty when it loaded).
std::string load_error(const std::string& name, const std::string& text) {
  const std::string path = write_temp(name, text);
  try {
    load_suite_file(path);
  } catch (const ValueError& e) {
    fs::remove(path);
    return e.what();
  }
  fs::remove(path);
  return {};
}

const char* kGood = R"(suite: mini
description: two cases
groups:
  - model: Test model
    cases:
      - {op: aten::mm, M: 2, K: 3, N: 4, tag: t}
      - {name: named, op: aten::addmm, M: 5, K: 6, N: 7, dtype: float32, alpha: 0.5, beta: 2}
)";

TEST(Suite, LoadsCasesWithDefaultsAndNames) {
  const std::string path = write_temp("good", kGood);
  const Suite s = load_suite_file(path);
  fs::remove(path);
  EXPECT_EQ(s.name, "mini");
  ASSERT_EQ(s.cases.size(), 2U);
  EXPECT_EQ(s.cases[0].name, "mm_2x3x4");
  EXPECT_EQ(s.cases[0].model, "Test model");
  EXPECT_EQ(s.cases[0].line, 6);
  EXPECT_EQ(s.cases[1].name, "named");
  EXPECT_DOUBLE_EQ(s.cases[1].alpha, 0.5);
  EXPECT_DOUBLE_EQ(s.cases[1].beta, 2.0);
}

TEST(Suite, ErrorsNameFileAndLine) {
  struct Bad {
    const char* name;
    const char* text;
    const char* line;     // "<file>:<line>:" expected in the message
    const char* message;  // and this fragment
  };
  const Bad cases[] = {
      {"syntax", "suite: x\ngroups:\n  - model: m\n    cases: [ {op: aten::mm, M: 1\n", ":5:",
       "YAML syntax error"},
      {"unknown_key", "suite: x\ngroups:\n  - model: m\n    cases:\n      - {op: aten::mm, M: 1, K: 1, N: 1, Q: 3}\n",
       ":5:", "unknown key 'Q'"},
      {"missing", "suite: x\ngroups:\n  - model: m\n    cases:\n      - {op: aten::mm, M: 1, N: 1}\n",
       ":5:", "has no 'K'"},
      {"bad_value", "suite: x\ngroups:\n  - model: m\n    cases:\n      - {op: aten::mm, M: many, K: 1, N: 1}\n",
       ":5:", "bad value 'many' for 'M'"},
      {"negative", "suite: x\ngroups:\n  - model: m\n    cases:\n      - {op: aten::mm, M: -4, K: 1, N: 1}\n",
       ":5:", "out of range"},
      {"bad_op", "suite: x\ngroups:\n  - model: m\n    cases:\n      - {op: aten::conv2d, M: 1, K: 1, N: 1}\n",
       ":5:", "unsupported op 'aten::conv2d'"},
      {"dtype", "suite: x\ngroups:\n  - model: m\n    cases:\n      - {op: aten::mm, M: 1, K: 1, N: 1, dtype: int8}\n",
       ":5:", "unknown dtype 'int8'"},
      {"dup", "suite: x\ngroups:\n  - model: m\n    cases:\n      - {name: a, op: aten::mm, M: 1, K: 1, N: 1}\n      - {name: a, op: aten::mm, M: 2, K: 1, N: 1}\n",
       ":6:", "duplicate case name 'a'"},
      {"no_groups", "suite: x\n", ":1:", "'groups' must be a non-empty list"},
      {"not_map", "- 1\n- 2\n", ":1:", "must be a mapping"},
  };
  for (const Bad& b : cases) {
    const std::string err = load_error(b.name, b.text);
    EXPECT_NE(err.find("ka_suite_test_" + std::string(b.name) + ".yaml" + b.line), std::string::npos)
        << b.name << ": " << err;
    EXPECT_NE(err.find(b.message), std::string::npos) << b.name << ": " << err;
  }
}

TEST(Suite, LookupByNameAndUnknownNames) {
  const std::string file = find_suite_file("matmul", KA_TEST_SUITES_DIR);
  EXPECT_EQ(fs::path(file).filename(), "matmul.yaml");
  try {
    find_suite_file("no_such_suite", KA_TEST_SUITES_DIR);
    FAIL();
  } catch (const ValueError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("unknown suite 'no_such_suite'"), std::string::npos);
    EXPECT_NE(what.find("matmul"), std::string::npos) << "lists the available suites: " << what;
  }
  const auto names = list_suites(KA_TEST_SUITES_DIR);
  EXPECT_NE(std::find(names.begin(), names.end(), "smoke"), names.end());
}

TEST(Suite, ShippedMatmulSuiteCoversTheRealModelShapes) {
  const Suite s = load_suite_file(find_suite_file("matmul", KA_TEST_SUITES_DIR));
  std::set<std::string> models;
  std::set<std::int64_t> square;
  bool decode_1 = false, decode_16 = false, prefill_512 = false, bert = false, gpt2 = false;
  for (const auto& c : s.cases) {
    models.insert(c.model);
    if (c.tag == "square") square.insert(c.m);
    if (c.model.find("LLaMA-7B") != std::string::npos) {
      decode_1 |= c.m == 1 && (c.k == 11008 || c.n == 11008);
      decode_16 |= c.m == 16;
      prefill_512 |= c.m == 512 && c.k == 4096;
    }
    bert |= c.model.find("BERT-base") != std::string::npos && c.n == 3072;
    gpt2 |= c.model.find("GPT-2") != std::string::npos && c.m == 1024;
  }
  EXPECT_EQ(square, (std::set<std::int64_t>{128, 256, 512, 1024, 2048}));
  EXPECT_TRUE(decode_1 && decode_16 && prefill_512 && bert && gpt2);
  EXPECT_GE(models.size(), 4U);
  EXPECT_NO_THROW(load_suite_file(find_suite_file("smoke", KA_TEST_SUITES_DIR)));
}

TEST(Suite, EveryShippedSuiteLoads) {
  const auto names = list_suites(KA_TEST_SUITES_DIR);
  for (const char* want : {"matmul", "fused", "memory", "smoke", "gemm_gpu"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    const Suite s = load_suite_file(find_suite_file(name, KA_TEST_SUITES_DIR));
    EXPECT_FALSE(s.cases.empty());
  }
  // The memory suite: 16M-element element-wise cases and rows of 4096 (issue targets).
  const Suite m = load_suite_file(find_suite_file("memory", KA_TEST_SUITES_DIR));
  int big = 0;
  for (const auto& c : m.cases) {
    ASSERT_TRUE(c.is_graph()) << c.name;
    std::int64_t numel = 1;
    for (const auto d : c.inputs.front().shape) numel *= d;
    big += numel == 16777216 ? 1 : 0;
  }
  EXPECT_EQ(big, static_cast<int>(m.cases.size()));
}

const char* kGraphSuite = R"(suite: graphs
graphs:
  ln: |
    graph(%x : Tensor, %w : Tensor, %b : Tensor):
      %eps : float = prim::Constant[value=1.0000000000000001e-05]()
      %true : bool = prim::Constant[value=1]()
      %n : int = prim::Constant[value=${HIDDEN}]()
      %shape : int[] = prim::ListConstruct(%n)
      %y : Tensor = aten::layer_norm(%x, %shape, %w, %b, %eps, %true)
      return (%y)
  scores: |
    graph(%s : Tensor, %mask : Tensor):
      %one : int = prim::Constant[value=1]()
      %u : Tensor = aten::add(%s, %mask, %one)
      return (%u)
groups:
  - model: Test model
    cases:
      - {name: ln_64, graph: ln, params: {HIDDEN: 64}, inputs: {b: [64], x: [5, 64], w: [64]}, tag: norm}
      - {name: scores, graph: scores, inputs: {s: [2, 4, 4], mask: [2, 4, 4]}, rtol: 0.001}
      - {name: causal, graph: scores, inputs: {s: [4, 4], mask: {shape: [4, 4], fill: causal}}}
      - {op: aten::mm, M: 2, K: 3, N: 4}
)";

TEST(Suite, LoadsGraphCasesFromTemplates) {
  const std::string path = write_temp("graphs", kGraphSuite);
  const Suite s = load_suite_file(path);
  fs::remove(path);
  ASSERT_EQ(s.graphs.size(), 2U);
  EXPECT_EQ(s.graphs.at("ln").line, 3);
  ASSERT_EQ(s.cases.size(), 4U);
  const SuiteCase& ln = s.cases[0];
  EXPECT_TRUE(ln.is_graph());
  EXPECT_EQ(ln.graph, "ln");
  EXPECT_EQ(ln.line, 19);
  EXPECT_EQ(ln.model, "Test model");
  EXPECT_NE(ln.ir.find("prim::Constant[value=64]()"), std::string::npos) << ln.ir;
  EXPECT_EQ(ln.ir.find("${"), std::string::npos);
  // Inputs come in the graph's order, whatever the order in the file.
  ASSERT_EQ(ln.inputs.size(), 3U);
  EXPECT_EQ(ln.inputs[0].name, "x");
  EXPECT_EQ(ln.inputs[0].shape, (std::vector<std::int64_t>{5, 64}));
  EXPECT_EQ(ln.inputs[2].name, "b");
  EXPECT_EQ(ln.inputs[0].fill, InputFill::kRandn);
  EXPECT_DOUBLE_EQ(ln.rtol, 1e-4);
  const SuiteCase& scores = s.cases[1];
  EXPECT_EQ(scores.inputs[1].fill, InputFill::kMask) << "an input named mask is a mask";
  EXPECT_DOUBLE_EQ(scores.rtol, 1e-3);
  EXPECT_EQ(s.cases[2].inputs[1].fill, InputFill::kCausal);
  EXPECT_FALSE(s.cases[3].is_graph());
  EXPECT_EQ(s.cases[3].name, "mm_2x3x4");
}

TEST(Suite, GraphInputsTakeADtypeAndAnIntegerRange) {
  const std::string path = write_temp("dtypes", R"(suite: x
graphs:
  g: |
    graph(%ids : Tensor, %keep : Tensor, %pos : Tensor, %x : Tensor, %h : Tensor, %b : Tensor):
      return (%ids, %keep, %pos, %x, %h, %b)
groups:
  - model: m
    cases:
      - name: c
        graph: g
        inputs:
          ids: {shape: [2, 8], dtype: int64, range: [0, 30522]}
          keep: {shape: [2, 8], dtype: bool}
          pos: {shape: [8], dtype: int32}
          x: {shape: [2, 8, 4], dtype: float32}
          h: {shape: [4], dtype: float16, fill: mask}
          b: {shape: [4], dtype: uint8, range: [0, 256]}
)");
  const Suite s = load_suite_file(path);
  fs::remove(path);
  ASSERT_EQ(s.cases.size(), 1U);
  const std::vector<GraphInput>& in = s.cases[0].inputs;
  ASSERT_EQ(in.size(), 6U);
  EXPECT_EQ(in[0].dtype, InputDtype::kInt64);
  EXPECT_EQ(in[0].low, 0);
  EXPECT_EQ(in[0].high, 30522);
  EXPECT_EQ(in[1].dtype, InputDtype::kBool);
  EXPECT_EQ(in[2].dtype, InputDtype::kInt32);
  EXPECT_EQ(in[2].high, 2) << "integers default to 0 and 1";
  EXPECT_EQ(in[3].dtype, InputDtype::kFloat32);
  EXPECT_EQ(in[3].fill, InputFill::kRandn);
  EXPECT_EQ(in[4].dtype, InputDtype::kFloat16);
  EXPECT_EQ(in[4].fill, InputFill::kMask);
  EXPECT_EQ(in[5].dtype, InputDtype::kUInt8);
  EXPECT_EQ(in[5].high, 256);
  // Sizes in bytes: int64 8, bool 1, int32 and float32 4, float16 2, uint8 1 per element.
  EXPECT_EQ(case_tensor_bytes(s.cases[0]), std::uint64_t{16 * 8 + 16 + 8 * 4 + 64 * 4 + 8 + 4});
}

// A model's non-tensor arguments (--input NAME=VALUE, or a value in a suite file).
TEST(Suite, InputValuesParseAsPythonWritesThem) {
  const auto kind = [](const std::string& text) {
    const std::optional<InputValue> v = parse_input_value(text);
    return v ? to_string(*v) : std::string("refused");
  };
  EXPECT_EQ(kind("3"), "3");
  EXPECT_EQ(kind("-12"), "-12");
  EXPECT_EQ(kind("0.5"), "0.5");
  EXPECT_EQ(kind("1e-5"), "1e-05");
  EXPECT_EQ(kind(".25"), "0.25");
  EXPECT_EQ(kind("true"), "True");
  EXPECT_EQ(kind("False"), "False");
  EXPECT_EQ(kind("none"), "None");
  EXPECT_EQ(kind("null"), "None");
  EXPECT_EQ(kind(""), "refused");
  EXPECT_EQ(kind("3x"), "refused");
  EXPECT_EQ(kind("inf"), "refused");
  EXPECT_EQ(kind("nan"), "refused");
  EXPECT_EQ(kind("1 2"), "refused");
  EXPECT_EQ(kind("yes"), "refused");
  EXPECT_EQ(parse_input_value("7")->kind, InputValue::Kind::kInt);
  EXPECT_EQ(parse_input_value("7.0")->kind, InputValue::Kind::kFloat);
}

TEST(Suite, GraphCaseErrorsNameFileAndLine) {
  const std::string head = R"(suite: x
graphs:
  g: |
    graph(%a : Tensor, %b : Tensor):
      %one : int = prim::Constant[value=${ONE}]()
      %c : Tensor = aten::add(%a, %b, %one)
      return (%c)
groups:
  - model: m
    cases:
)";
  struct Bad {
    const char* name;
    std::string text;
    const char* line;
    const char* message;
  };
  const Bad cases[] = {
      {"unknown_graph",
       head + "      - {name: c, graph: h, params: {ONE: 1}, inputs: {a: [2], b: [2]}}\n",
       ":11:", "unknown graph 'h' (the suite's graphs: g)"},
      {"missing_input", head + "      - {name: c, graph: g, params: {ONE: 1}, inputs: {a: [2]}}\n",
       ":11:", "missing input 'b' of graph 'g'"},
      {"extra_input",
       head + "      - {name: c, graph: g, params: {ONE: 1},\n         inputs: {a: [2], b: [2], z: "
              "[3]}}\n",
       ":12:", "graph 'g' has no input 'z' (its inputs: a, b)"},
      {"bad_shape",
       head + "      - {name: c, graph: g, params: {ONE: 1}, inputs: {a: [2, x], b: [2]}}\n",
       ":11:", "bad size 'x' in the shape of input 'a'"},
      {"shape_not_list",
       head + "      - {name: c, graph: g, params: {ONE: 1}, inputs: {a: 2, b: [2]}}\n",
       ":11:", "input 'a' of graph 'g' is a Tensor: give it a shape, e.g. [512, 768], not a value"},
      {"shape_not_list_or_value",
       head + "      - {name: c, graph: g, params: {ONE: 1}, inputs: {a: {rows: 2}, b: [2]}}\n",
       ":11:", "unknown key 'rows' in an input (allowed: dtype, fill, range, shape)"},
      {"bad_value",
       head + "      - {name: c, graph: g, params: {ONE: 1}, inputs: {a: {value: [2]}, b: [2]}}\n",
       ":11:", "bad value '' for input 'a' (an int, a float, true, false or none"},
      {"negative_dim",
       head + "      - {name: c, graph: g, params: {ONE: 1}, inputs: {a: [-2], b: [2]}}\n",
       ":11:", "out of range"},
      {"bad_fill",
       head + "      - {name: c, graph: g, params: {ONE: 1}, inputs: {a: {shape: [2], fill: ones}, "
              "b: [2]}}\n",
       ":11:", "bad fill 'ones' for input 'a'"},
      {"bad_dtype",
       head + "      - {name: c, graph: g, params: {ONE: 1}, inputs: {a: {shape: [2], dtype: "
              "float8}, b: [2]}}\n",
       ":11:", "bad dtype 'float8' for input 'a' (float32, int64, int32, bool, float64, float16, "
               "bfloat16, int16, int8, uint8)"},
      {"range_of_floats",
       head + "      - {name: c, graph: g, params: {ONE: 1}, inputs: {a: {shape: [2], range: "
              "[0, 9]}, b: [2]}}\n",
       ":11:", "input 'a' has a range but is float32"},
      {"empty_range",
       head + "      - {name: c, graph: g, params: {ONE: 1}, inputs: {a: {shape: [2], dtype: "
              "int64, range: [5, 5]}, b: [2]}}\n",
       ":11:", "the range of input 'a' is empty: 5 .. 5"},
      {"bad_range",
       head + "      - {name: c, graph: g, params: {ONE: 1}, inputs: {a: {shape: [2], dtype: "
              "int64, range: [0]}, b: [2]}}\n",
       ":11:", "the range of input 'a' must be [LOW, HIGH]"},
      {"int32_range",
       head + "      - {name: c, graph: g, params: {ONE: 1}, inputs: {a: {shape: [2], dtype: "
              "int32, range: [0, 4294967296]}, b: [2]}}\n",
       ":11:", "the range of input 'a' does not fit int32"},
      {"uint8_range",
       head + "      - {name: c, graph: g, params: {ONE: 1}, inputs: {a: {shape: [2], dtype: "
              "uint8, range: [-1, 10]}, b: [2]}}\n",
       ":11:", "the range of input 'a' does not fit uint8"},
      {"int8_range",
       head + "      - {name: c, graph: g, params: {ONE: 1}, inputs: {a: {shape: [2], dtype: "
              "int8, range: [0, 129]}, b: [2]}}\n",
       ":11:", "the range of input 'a' does not fit int8"},
      {"range_of_halves",
       head + "      - {name: c, graph: g, params: {ONE: 1}, inputs: {a: {shape: [2], dtype: "
              "float16, range: [0, 9]}, b: [2]}}\n",
       ":11:", "input 'a' has a range but is float16"},
      {"masked_ints",
       head + "      - {name: c, graph: g, params: {ONE: 1}, inputs: {a: {shape: [2], dtype: "
              "int64, fill: mask}, b: [2]}}\n",
       ":11:", "input 'a' is int64, but fill 'mask' makes floating-point values"},
      {"unset_param", head + "      - {name: c, graph: g, inputs: {a: [2], b: [2]}}\n",
       ":11:", "uses ${ONE} but the case's 'params' do not set ONE"},
      {"unused_param",
       head + "      - {name: c, graph: g, params: {ONE: 1, TWO: 2}, inputs: {a: [2], b: [2]}}\n",
       ":11:", "param 'TWO' is not used by graph 'g'"},
      {"bad_param",
       head + "      - {name: c, graph: g, params: {ONE: one}, inputs: {a: [2], b: [2]}}\n",
       ":11:", "bad value 'one' for param 'ONE'"},
      {"no_name", head + "      - {graph: g, params: {ONE: 1}, inputs: {a: [2], b: [2]}}\n",
       ":11:", "a graph case needs a 'name'"},
      {"op_key",
       head + "      - {name: c, graph: g, op: aten::mm, params: {ONE: 1}, inputs: {a: [2], b: "
              "[2]}}\n",
       ":11:", "unknown key 'op' in a graph case"},
      {"no_inputs", head + "      - {name: c, graph: g, params: {ONE: 1}}\n",
       ":11:", "a graph case needs 'inputs'"},
      {"bad_ir",
       "suite: x\ngraphs:\n  g: |\n    graph(%a : Tensor):\n      %c : Tensor = aten::add(%a, "
       "%zz)\n      return (%c)\n"
       "groups:\n  - model: m\n    cases:\n      - {name: c, graph: g, inputs: {a: [2]}}\n",
       ":10:", "graph 'g' (line 3): TorchScript IR does not parse"},
      {"no_graphs",
       "suite: x\ngroups:\n  - model: m\n    cases:\n      - {name: c, graph: g, inputs: {a: "
       "[2]}}\n",
       ":5:", "unknown graph 'g' (the suite has no 'graphs')"},
      {"graph_not_text",
       "suite: x\ngraphs:\n  g: [1, 2]\ngroups:\n  - model: m\n    cases:\n      - {op: aten::mm, "
       "M: 1, K: 1, N: 1}\n",
       ":3:", "graph 'g' must be TorchScript IR text"},
  };
  for (const Bad& b : cases) {
    const std::string err = load_error(b.name, b.text);
    EXPECT_NE(err.find("ka_suite_test_" + std::string(b.name) + ".yaml" + b.line),
              std::string::npos)
        << b.name << ": " << err;
    EXPECT_NE(err.find(b.message), std::string::npos) << b.name << ": " << err;
  }
}

TEST(Suite, ShippedFusedSuiteCoversTheTransformerPatterns) {
  const Suite s = load_suite_file(find_suite_file("fused", KA_TEST_SUITES_DIR));
  std::set<std::string> graphs;
  bool bert_mlp = false, gpt2_mlp = false, bert_scores = false, gpt2_scores = false;
  bool bert_ln = false, gpt2_ln = false, bert_attention = false, gpt2_attention = false;
  for (const auto& c : s.cases) {
    ASSERT_TRUE(c.is_graph()) << c.name;
    graphs.insert(c.graph);
    const auto& x = c.inputs[0].shape;
    const bool bert = c.model.find("BERT-base") != std::string::npos;
    const bool gpt2 = c.model.find("GPT-2") != std::string::npos;
    if (c.graph.rfind("mlp", 0) == 0) {
      const bool shape = x.size() == 2 && x[1] == 768 && c.inputs[1].shape[0] == 3072;
      bert_mlp |= bert && shape && x[0] == 512 && c.graph == "mlp_gelu";
      gpt2_mlp |= gpt2 && shape && x[0] == 1024 && c.graph == "mlp_gelu_tanh";
    } else if (c.graph == "attention_scores") {
      const bool shape = x.size() == 3 && x[0] == 12 && x[2] == 64;
      bert_scores |= bert && shape && x[1] == 512 && c.inputs[2].fill == InputFill::kMask;
      gpt2_scores |= gpt2 && shape && x[1] == 1024 && c.inputs[2].fill == InputFill::kCausal;
    } else if (c.graph.rfind("attention", 0) == 0) {
      // 12 heads of 64 over 512 (BERT) and 1024 tokens (GPT-2, causal), as bmm and as matmul.
      const bool heads = x.size() >= 3 && x[x.size() - 3] == 12 && x.back() == 64;
      bert_attention |= bert && heads && x[x.size() - 2] == 512;
      gpt2_attention |= gpt2 && heads && x[x.size() - 2] == 1024 &&
                        c.inputs[3].fill == InputFill::kCausal;
    } else if (c.graph == "residual_layer_norm") {
      bert_ln |= bert && x == std::vector<std::int64_t>{512, 768} && c.params.at("HIDDEN") == 768;
      gpt2_ln |= gpt2 && x == std::vector<std::int64_t>{1024, 768};
    }
  }
  EXPECT_TRUE(bert_mlp && gpt2_mlp && bert_scores && gpt2_scores && bert_ln && gpt2_ln);
  EXPECT_TRUE(bert_attention && gpt2_attention);
  EXPECT_EQ(graphs.size(), 6U);
}

}  // namespace
}  // namespace ka::harness
