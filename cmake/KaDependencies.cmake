# Third-party dependencies. All come from Debian packages (scripts/setup.sh installs them).

find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(SQLite3 REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(benchmark REQUIRED)
if(KA_ENABLE_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()

# libtorch: Debian's 1.13 (CPU) here; a GPU machine may bring a 2.x with CUDA, found through
# CMAKE_PREFIX_PATH (python3 -c 'import torch; print(torch.utils.cmake_prefix_path)').
find_package(Torch REQUIRED)
# ka::libtorch: what a module that uses ATen/c10 links. Exported with ka's package, where
# kaConfig.cmake finds Torch first (its `torch` and c10 targets are what this names).
add_library(ka_libtorch INTERFACE)
add_library(ka::libtorch ALIAS ka_libtorch)
target_link_libraries(ka_libtorch INTERFACE ${TORCH_LIBRARIES})
target_compile_options(ka_libtorch INTERFACE ${TORCH_CXX_FLAGS})
set_target_properties(ka_libtorch PROPERTIES EXPORT_NAME libtorch)
install(TARGETS ka_libtorch EXPORT kaTargets)

# CUDA: compiled whenever nvcc exists.
set(KA_HAVE_CUDA OFF)
if(KA_ENABLE_CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Hopper (H100/H200) is the GPU these machines are lent; add more with -DCMAKE_CUDA_ARCHITECTURES.
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(KA_HAVE_CUDA ON)
    message(STATUS "ka: CUDA ${CMAKE_CUDA_COMPILER_VERSION} enabled, architectures ${CMAKE_CUDA_ARCHITECTURES}")
  else()
    message(STATUS "ka: nvcc not found; CUDA kernels are not compiled")
  endif()
endif()
