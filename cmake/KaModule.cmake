# ka_add_module(NAME SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...])
# Declares the library ka_<NAME> (alias ka::<NAME>) with public headers in
# <NAME>/include and private code in <NAME>/src, and installs both in ka's CMake package
# (ka::<NAME> there too; see KaInstall.cmake).
function(ka_add_module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(ka_${name} STATIC ${ARG_SOURCES})
  add_library(ka::${name} ALIAS ka_${name})
  target_include_directories(ka_${name}
    PUBLIC $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
           $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  # ka's warning flags are for ka's own sources, not for a program that links the module.
  target_link_libraries(ka_${name} PUBLIC ${ARG_PUBLIC_DEPS}
                        PRIVATE $<BUILD_INTERFACE:ka::warnings> ${ARG_PRIVATE_DEPS})
  set_target_properties(ka_${name} PROPERTIES EXPORT_NAME ${name})
  install(TARGETS ka_${name} EXPORT kaTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endfunction()

# ka_add_unit_test(MODULE SOURCES ... [DEPS ...]): one test executable per module,
# registered with gtest_discover_tests and labelled `unit`.
function(ka_add_unit_test module)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  set(target ka_${module}_tests)
  add_executable(${target} ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE ka::warnings ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  gtest_discover_tests(${target}
    PROPERTIES LABELS unit
    DISCOVERY_TIMEOUT 120)
endfunction()
