// The pipeline on a GPU: eager calls and graphs on CUDA tensors go through ka's CUDA kernels,
// the CUDA executor orders graph tasks with events. Needs libtorch with CUDA (tensors on the
// device); skips with the reason otherwise.
#include <ka/executor/cuda_executor.hpp>
#include <ka/extractor/extractor.hpp>
#include <ka/runtime/runtime.hpp>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include "require_cuda.hpp"

#include <string>
#include <vector>

namespace ka::runtime {
namespace {

TEST(PipelineCuda, EagerOpsRunOnTheInputsDevice) {
  KA_REQUIRE_CUDA_TENSORS();
  Runtime rt;
  const at::Tensor a = at::randn({257, 129});
  const at::Tensor b = at::randn({129});
  const auto out = rt.call("aten::add.Tensor", {a.cuda(), b.cuda(), 2});
  const at::Tensor got = out[0].toTensor();
  EXPECT_TRUE(got.is_cuda());
  EXPECT_TRUE(at::allclose(got.cpu(), a + 2 * b, 1e-5, 1e-5));
  const at::Tensor w = at::randn({64, 129});
  const auto lin = rt.call("aten::linear", {a.cuda(), w.cuda(), c10::IValue()});
  EXPECT_TRUE(at::allclose(lin[0].toTensor().cpu(), at::linear(a, w), 1e-3, 1e-3));
}

TEST(PipelineCuda, AFusedGraphMatchesTheCpuRun) {
  KA_REQUIRE_CUDA_TENSORS();
  const std::string ir = R"IR(
graph(%q : Tensor, %k : Tensor, %mask : Tensor):
  %scale : float = prim::Constant[value=0.125]()
  %dim : int = prim::Constant[value=-1]()
  %one : int = prim::Constant[value=1]()
  %false : bool = prim::Constant[value=0]()
  %s : Tensor = aten::bmm(%q, %k)
  %t : Tensor = aten::mul(%s, %scale)
  %u : Tensor = aten::add(%t, %mask, %one)
  %p : Tensor = aten::_softmax(%u, %dim, %false)
  return (%p)
)IR";
  Runtime rt;
  const std::vector<c10::IValue> cpu = {at::randn({4, 33, 64}), at::randn({4, 64, 33}),
                                        at::zeros({4, 33, 33})};
  std::vector<c10::IValue> gpu;
  for (const auto& v : cpu) gpu.emplace_back(v.toTensor().cuda());
  const GraphResult want = rt.run_graph(ir, cpu);
  const GraphResult got = rt.run_graph(ir, gpu);
  EXPECT_TRUE(at::allclose(got.outputs[0].toTensor().cpu(), want.outputs[0].toTensor(), 1e-4, 1e-5));
  for (const auto& t : got.tasks) EXPECT_EQ(t.device, "cuda:0");
}

}  // namespace
}  // namespace ka::runtime
