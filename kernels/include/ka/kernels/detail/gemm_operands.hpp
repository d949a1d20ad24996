// The GEMMs' operand checks and bias view, shared by the CPU and CUDA kernels (the CUDA ones
// through their .cuh, which the host-emulated tests include too).
#pragma once

#include <ka/core/device.hpp>
#include <ka/core/shape_key.hpp>
#include <ka/kernels/gemm.hpp>

#include <cstdint>

namespace ka::kernels::detail {

/// Where the bias comes from once broadcast to [M, N]: element (i, j) is at
/// data[i * row_stride + j * col_stride]. `data` is null when there is no bias term.
struct BiasView {
  const float* data = nullptr;
  std::int64_t row_stride = 0;
  std::int64_t col_stride = 0;
};

/// Validates an AddmmArgs (dtypes, ranks, inner dimensions, out shape, bias broadcast) and
/// returns M, N, K. Throws ka::ValueError naming the offending argument and shapes.
GemmShape validate_addmm(const AddmmArgs& args, DeviceType expected_device);

/// The bias view of args.self broadcast to [M, N]; empty when there is no self or beta == 0.
BiasView broadcast_bias(const AddmmArgs& args, std::int64_t m, std::int64_t n);

/// Batch count and per-batch M, N, K of a bmm.
struct BmmShape {
  std::int64_t batch = 0;
  GemmShape gemm;
};

/// Validates a BmmArgs (dtypes, devices, ranks, batch and inner dimensions, out shape), for
/// the CPU and CUDA kernels alike. Throws ka::ValueError naming the offending argument and
/// shapes.
BmmShape validate_bmm(const BmmArgs& args, DeviceType expected_device);

/// Reads B, M, N, K from a shape key of aten::bmm(mat1, mat2). Throws ka::ValueError when the
/// key is not a well-formed batched GEMM.
BmmShape bmm_shape(const ShapeKey& key);

}  // namespace ka::kernels::detail
