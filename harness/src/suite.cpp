#include <ka/core/dtype.hpp>
#include <ka/core/error.hpp>
#include <ka/harness/suite.hpp>

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

namespace ka::harness {
namespace fs = std::filesystem;
namespace {

// Note [Suite file format]
//   suite: matmul
//   description: ...
//   groups:
//     - model: BERT-base (hidden 768, FFN 3072)
//       cases:
//         - {name: bert_qkv_512, op: aten::addmm, M: 512, K: 768, N: 768, dtype: float32, tag: prefill}
// `name` is optional (default: <op short name>_<M>x<K>x<N>); alpha/beta are optional (1.0).

[[noreturn]] void fail(const std::string& path, const YAML::Mark& mark, const std::string& what) {
  // yaml-cpp marks are 0-based; editors count from 1.
  KA_THROW(ValueError, path, ":", mark.line + 1, ": ", what);
}

void check_keys(const std::string& path, const YAML::Node& node,
                const std::set<std::string>& allowed, const char* where) {
  for (const auto& kv : node) {
    const auto key = kv.first.as<std::string>();
    if (allowed.count(key) == 0) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      fail(path, kv.first.Mark(), "unknown key '" + key + "' in " + where + " (allowed: " + list + ")");
    }
  }
}

template <typename T>
T scalar(const std::string& path, const YAML::Node& parent, const char* key, const char* what) {
  const YAML::Node node = parent[key];
  if (!node) fail(path, parent.Mark(), std::string(what) + " has no '" + key + "'");
  if (!node.IsScalar()) fail(path, node.Mark(), std::string("'") + key + "' must be a scalar");
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    fail(path, node.Mark(), std::string("bad value '") + node.Scalar() + "' for '" + key + "'");
  }
}

std::int64_t dimension(const std::string& path, const YAML::Node& c, const char* key) {
  const auto v = scalar<std::int64_t>(path, c, key, "case");
  if (v < 0 || v > (std::int64_t{1} << 24)) {
    fail(path, c[key].Mark(), std::string(key) + " = " + std::to_string(v) +
                                  " is out of range (0 .. 16777216)");
  }
  return v;
}

fs::path executable_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

bool looks_like_path(const std::string& s) {
  return s.find('/') != std::string::npos ||
         (s.size() > 5 && s.compare(s.size() - 5, 5, ".yaml") == 0);
}

}  // namespace

std::vector<std::string> suite_search_path(const std::string& explicit_dir) {
  std::vector<std::string> dirs;
  if (!explicit_dir.empty()) dirs.push_back(explicit_dir);
  if (const char* env = std::getenv("KA_SUITES_DIR"); env != nullptr && *env != '\0') {
    dirs.emplace_back(env);
  }
#ifdef KA_SOURCE_SUITES_DIR
  dirs.emplace_back(KA_SOURCE_SUITES_DIR);
#endif
  const fs::path exe_dir = executable_dir();
  if (!exe_dir.empty()) dirs.push_back((exe_dir.parent_path() / "share" / "ka" / "suites").string());
  return dirs;
}

std::vector<std::string> list_suites(const std::string& explicit_dir) {
  std::set<std::string> names;
  for (const auto& dir : suite_search_path(explicit_dir)) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (entry.path().extension() == ".yaml") names.insert(entry.path().stem().string());
    }
  }
  return {names.begin(), names.end()};
}

std::string find_suite_file(const std::string& name_or_path, const std::string& explicit_dir) {
  if (looks_like_path(name_or_path)) {
    KA_CHECK(fs::is_regular_file(name_or_path), "suite file '", name_or_path, "' does not exist");
    return name_or_path;
  }
  const auto dirs = suite_search_path(explicit_dir);
  for (const auto& dir : dirs) {
    const fs::path candidate = fs::path(dir) / (name_or_path + ".yaml");
    if (fs::is_regular_file(candidate)) return candidate.string();
  }
  std::string searched;
  for (const auto& d : dirs) searched += (searched.empty() ? "" : ", ") + d;
  std::string known;
  for (const auto& s : list_suites(explicit_dir)) known += (known.empty() ? "" : ", ") + s;
  KA_THROW(ValueError, "unknown suite '", name_or_path, "' (searched: ", searched,
           "; available: ", known.empty() ? "none" : known, ")");
}

Suite load_suite_file(const std::string& path) {
  std::ifstream in(path);
  KA_CHECK(in.good(), "cannot read suite file '", path, "'");
  YAML::Node root;
  try {
    root = YAML::Load(in);
  } catch (const YAML::ParserException& e) {
    fail(path, e.mark, "YAML syntax error: " + e.msg);
  }
  if (!root || !root.IsMap()) {
    KA_THROW(ValueError, path, ":1: a suite file must be a mapping with 'suite' and 'groups'");
  }
  check_keys(path, root, {"suite", "description", "groups"}, "the suite");
  Suite suite;
  suite.path = path;
  suite.name = scalar<std::string>(path, root, "suite", "the suite");
  if (root["description"]) suite.description = scalar<std::string>(path, root, "description", "the suite");
  const YAML::Node groups = root["groups"];
  if (!groups || !groups.IsSequence() || groups.size() == 0) {
    fail(path, groups ? groups.Mark() : root.Mark(), "'groups' must be a non-empty list");
  }
  std::set<std::string> seen;
  for (const auto& group : groups) {
    if (!group.IsMap()) fail(path, group.Mark(), "each group must be a mapping with 'model' and 'cases'");
    check_keys(path, group, {"model", "source", "cases"}, "a group");
    const auto model = scalar<std::string>(path, group, "model", "group");
    const YAML::Node cases = group["cases"];
    if (!cases || !cases.IsSequence() || cases.size() == 0) {
      fail(path, cases ? cases.Mark() : group.Mark(), "group '" + model + "' needs a non-empty 'cases' list");
    }
    for (const auto& c : cases) {
      if (!c.IsMap()) fail(path, c.Mark(), "each case must be a mapping");
      check_keys(path, c, {"name", "op", "M", "K", "N", "dtype", "tag", "alpha", "beta"}, "a case");
      SuiteCase sc;
      sc.line = c.Mark().line + 1;
      sc.model = model;
      sc.op = scalar<std::string>(path, c, "op", "case");
      if (sc.op != "aten::mm" && sc.op != "aten::addmm") {
        fail(path, c["op"].Mark(), "unsupported op '" + sc.op + "' (this suite runner knows aten::mm and aten::addmm)");
      }
      sc.m = dimension(path, c, "M");
      sc.k = dimension(path, c, "K");
      sc.n = dimension(path, c, "N");
      if (c["dtype"]) sc.dtype = scalar<std::string>(path, c, "dtype", "case");
      try {
        if (parse_dtype(sc.dtype) != DType::kFloat32) {
          fail(path, c["dtype"].Mark(), "dtype '" + sc.dtype + "' is not supported yet (float32 only)");
        }
      } catch (const ValueError& e) {
        if (std::string(e.what()).rfind(path, 0) == 0) throw;
        fail(path, c["dtype"].Mark(), e.what());
      }
      if (c["tag"]) sc.tag = scalar<std::string>(path, c, "tag", "case");
      if (c["alpha"]) sc.alpha = scalar<double>(path, c, "alpha", "case");
      if (c["beta"]) sc.beta = scalar<double>(path, c, "beta", "case");
      const std::string short_op = sc.op.substr(sc.op.find("::") + 2);
      sc.name = c["name"] ? scalar<std::string>(path, c, "name", "case")
                          : short_op + "_" + std::to_string(sc.m) + "x" + std::to_string(sc.k) +
                                "x" + std::to_string(sc.n);
      const bool name_ok = !sc.name.empty() && std::all_of(sc.name.begin(), sc.name.end(), [](char ch) {
        return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.';
      });
      if (!name_ok) {
        fail(path, c.Mark(), "case name '" + sc.name + "' may only hold letters, digits, _ - .");
      }
      if (!seen.insert(sc.name).second) {
        fail(path, c.Mark(), "duplicate case name '" + sc.name + "'");
      }
      suite.cases.push_back(std::move(sc));
    }
  }
  return suite;
}

}  // namespace ka::harness
