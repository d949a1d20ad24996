# ka_add_module(NAME SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...])
# Declares the library ka_<NAME> (alias ka::<NAME>) with public headers in
# <NAME>/include and private code in <NAME>/src.
function(ka_add_module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(ka_${name} STATIC ${ARG_SOURCES})
  add_library(ka::${name} ALIAS ka_${name})
  target_include_directories(ka_${name}
    PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_link_libraries(ka_${name} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ka::warnings ${ARG_PRIVATE_DEPS})
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
