// What BLAS libtorch calls into, read from the loaded library (OpenBLAS exports these).
#pragma once

#include <string>

namespace ka::harness::detail {

struct BlasInfo {
  std::string coretype_env;  ///< OPENBLAS_CORETYPE as set in the environment ("" when unset).
  std::string core;          ///< openblas_get_corename(), e.g. "Haswell", "SkylakeX"; "" if n/a.
  std::string config;        ///< openblas_get_config(); "" if OpenBLAS is not loaded.
};

BlasInfo blas_info();
/// Sets OpenBLAS's thread count when OpenBLAS is loaded; returns whether it was.
bool set_openblas_threads(int threads);

}  // namespace ka::harness::detail
