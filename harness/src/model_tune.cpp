// ka-tune --model's work list. See harness/include/ka/harness/model_tune.hpp.
#include <ka/core/error.hpp>
#include <ka/core/shape_key.hpp>
#include <ka/harness/detail/bench_case.hpp>
#include <ka/harness/model_tune.hpp>
#include <ka/harness/suite.hpp>

#include <algorithm>
#include <optional>

namespace ka::harness {
namespace {

std::string join_sizes(const std::vector<std::int64_t>& sizes) {
  std::string s;
  for (const std::int64_t d : sizes) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

// ka-tune's ops that take the input's sizes as their shape.
bool tunes_by_sizes(const std::string& op) {
  static const char* const kOps[] = {"aten::_softmax", "aten::layer_norm", "aten::sum.dim_IntList",
                                     "aten::add.Tensor", "aten::mul.Tensor", "aten::relu",
                                     "aten::gelu", "aten::sigmoid", "aten::silu",
                                     "aten::tanh", "aten::neg", "aten::exp"};
  return std::any_of(std::begin(kOps), std::end(kOps), [&](const char* o) { return op == o; });
}

// Note [Tuning a model's tasks]
// A task's shape key says what ka-tune must measure: GEMMs (aten::addmm, aten::mm: M x K x N,
// ':t' where B is the transpose of a contiguous matrix, as F.linear's weight is) and bmm
// (B x M x K x N, ':t' where B is strided, as attention's k.transpose is) by their operands'
// sizes; the other ops by their input's sizes. ka-tune's inputs have those layouts, so its
// rows are found by the model's calls. A GEMM whose A is not contiguous, a bmm whose A is
// strided, or an op ka-tune does not take, is skipped with the reason.
std::optional<TuningItem> tuning_item(const detail::TaskInfo& task, std::string& why) {
  const ShapeKey key = ShapeKey::parse(task.shape_key);
  const std::string& op = key.op();
  const auto& args = key.args();
  TuningItem item{op, "", task.pattern + " " + task.shape_key};
  if (op == "aten::addmm" || op == "aten::mm") {
    const std::size_t first = op == "aten::addmm" ? 1 : 0;
    const TensorSpec& a = args.at(first);
    const TensorSpec& b = args.at(first + 1);
    if (!a.contiguous || a.sizes.size() != 2 || b.sizes.size() != 2 || (!b.contiguous && !b.transposed)) {
      why = "its A is not a contiguous matrix, or B neither contiguous nor transposed";
      return std::nullopt;
    }
    item.shape = join_sizes({a.sizes[0], a.sizes[1], b.sizes[1]}) + (b.transposed ? ":t" : "");
    return item;
  }
  if (op == "aten::bmm") {
    const TensorSpec& a = args.at(0);
    const TensorSpec& b = args.at(1);
    if (!a.contiguous) {
      why = "its A is strided (ka-tune's bmm inputs have a contiguous A)";
      return std::nullopt;
    }
    item.shape = join_sizes({a.sizes[0], a.sizes[1], a.sizes[2], b.sizes[2]}) +
                 (b.contiguous ? "" : ":t");
    return item;
  }
  if (tunes_by_sizes(op) && !args.empty()) {
    item.shape = join_sizes(args[0].sizes);
    return item;
  }
  why = "ka-tune does not tune " + op;
  return std::nullopt;
}

}  // namespace

ModelTuningWork model_tuning_work(const std::string& file, const std::vector<std::string>& inputs,
                                  int threads) {
  const Suite suite = model_suite(file, inputs);
  const SuiteCase& c = suite.cases.at(0);
  const auto b = detail::make_bench_case(c, 20261203, detail::CaseContext{threads, ""});
  const detail::CheckResult r = b->check(1);  // unfused: every op its own task
  KA_CHECK(r.correct, "model '", file, "': ka's unfused run is not correct (", r.detail,
           "); nothing to tune");
  ModelTuningWork work;
  for (const detail::TaskInfo& task : b->info(1).tasks) {
    if (task.provenance == db::Provenance::kFallback) continue;
    std::string why;
    const std::optional<TuningItem> item = tuning_item(task, why);
    if (!item) {
      work.skipped.push_back(task.pattern + " " + task.shape_key + ": " + why);
      continue;
    }
    const bool seen = std::any_of(work.items.begin(), work.items.end(), [&](const TuningItem& t) {
      return t.op == item->op && t.shape == item->shape;
    });
    if (!seen) work.items.push_back(*item);
  }
  return work;
}

}  // namespace ka::harness
