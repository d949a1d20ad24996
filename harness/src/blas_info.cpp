#include "blas_info.hpp"

#include <dlfcn.h>

#include <cstdlib>

namespace ka::harness::detail {
namespace {

template <typename Fn>
Fn find_symbol(const char* name) {
  // RTLD_DEFAULT sees the BLAS that libtorch linked (libblas.so.3 -> OpenBLAS on Debian).
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

}  // namespace

BlasInfo blas_info() {
  BlasInfo info;
  if (const char* env = std::getenv("OPENBLAS_CORETYPE"); env != nullptr) info.coretype_env = env;
  if (auto corename = find_symbol<char* (*)()>("openblas_get_corename")) info.core = corename();
  if (auto config = find_symbol<char* (*)()>("openblas_get_config")) info.config = config();
  return info;
}

bool set_openblas_threads(int threads) {
  auto set = find_symbol<void (*)(int)>("openblas_set_num_threads");
  if (set == nullptr) return false;
  set(threads);
  return true;
}

}  // namespace ka::harness::detail
