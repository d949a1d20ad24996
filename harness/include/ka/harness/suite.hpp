// Suites: YAML files of operator cases drawn from real models (suites/*.yaml).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ka::harness {

/// One benchmark case: an operator at one shape.
struct SuiteCase {
  std::string name;   ///< Unique within the suite; part of the benchmark name.
  std::string op;     ///< Exact overload name: aten::mm or aten::addmm.
  std::int64_t m = 0;
  std::int64_t k = 0;
  std::int64_t n = 0;
  std::string dtype = "float32";
  std::string tag;    ///< Free-form grouping (square, decode, prefill, ...).
  std::string model;  ///< The model the shape comes from, as named in the suite file.
  double alpha = 1.0;
  double beta = 1.0;
  int line = 0;       ///< Line in the suite file, for error messages.
};

/// A loaded suite.
struct Suite {
  std::string name;
  std::string description;
  std::string path;
  std::vector<SuiteCase> cases;
};

/// Where suites are looked up by name, in order: `explicit_dir` if non-empty, $KA_SUITES_DIR,
/// the source tree's suites/ (compiled in), and <executable>/../share/ka/suites.
std::vector<std::string> suite_search_path(const std::string& explicit_dir);

/// Finds the file of suite `name_or_path` (a path when it contains '/' or ends in .yaml).
/// Throws ka::ValueError listing the searched folders and the suites found there.
std::string find_suite_file(const std::string& name_or_path, const std::string& explicit_dir);

/// Names of the suites in the search path (files *.yaml), sorted, without duplicates.
std::vector<std::string> list_suites(const std::string& explicit_dir);

/// Loads and validates a suite file. Throws ka::ValueError naming the file and line of the
/// first problem (YAML syntax, unknown key, missing field, bad value, duplicate case name).
Suite load_suite_file(const std::string& path);

}  // namespace ka::harness
