// Fusion decisions measured per pattern and shape: ka-tune --fusion.
#pragma once

#include <ka/profiler/measure.hpp>

#include <cstdio>
#include <string>
#include <vector>

namespace ka::harness {

/// What to measure.
struct FusionTuneOptions {
  std::string suite;       ///< A suite with graph cases (e.g. "fused").
  std::string suites_dir;
  /// Instead of `suite`: a TorchScript module and its inputs' shapes (model_suite()).
  std::string model;
  std::vector<std::string> model_inputs;
  std::string filter;      ///< Regex on case names; "" = all graph cases.
  std::string db_path = "ka.db";
  std::string command_line;
  profiler::MeasureOptions measure;
  std::FILE* out = stdout;
};

/// For every graph case of the suite: runs the graph fused and unfused (each timed by
/// profiler::measure), decides "fused" when the fused run's median interval lies below the
/// unfused one's, "unfused" when it lies above, and keeps the rule ("fused") when they
/// overlap; stores the decision with every fused task's pattern and shape key in the
/// recommendation table (which the extractor consults before fusing), and prints a table.
/// Returns 0, or 1 when a case failed. SIGINT/SIGTERM/SIGHUP stop it after the case under
/// way: the run is marked failed and ka::Interrupted is thrown. Throws ka::ValueError for a
/// bad suite.
int tune_fusion(const FusionTuneOptions& options);

}  // namespace ka::harness
