# ka's CMake package: `cmake --install build/ci --prefix P` installs the modules (static), their
# headers, libka_torch.so, ka-bench/ka-tune/ka-db, the suites and the Python package, and
# P/lib/cmake/ka/kaConfig.cmake, so that a production build does
#
#   find_package(ka CONFIG REQUIRED)     # CMAKE_PREFIX_PATH=P
#   target_link_libraries(app PRIVATE ka::torch)      # ka's kernels in PyTorch's dispatcher
#   target_link_libraries(tool PRIVATE ka::runtime)   # or ka's own pipeline
#
# and gets the targets' dependencies (Torch, fmt, spdlog, SQLite3, ..., CUDAToolkit where ka
# was built with CUDA) through find_dependency. ka::ka-db is the installed ka-db, for a build
# step that exports a tuned table as a header (examples/production).
include(CMakePackageConfigHelpers)
set(KA_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/ka)
install(EXPORT kaTargets NAMESPACE ka:: DESTINATION ${KA_INSTALL_CMAKEDIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/kaConfig.cmake.in
  ${CMAKE_BINARY_DIR}/kaConfig.cmake
  INSTALL_DESTINATION ${KA_INSTALL_CMAKEDIR}
  PATH_VARS KA_INSTALL_PYTHONDIR CMAKE_INSTALL_DATADIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/kaConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/kaConfig.cmake ${CMAKE_BINARY_DIR}/kaConfigVersion.cmake
  DESTINATION ${KA_INSTALL_CMAKEDIR})
