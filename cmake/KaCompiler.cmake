# Compiler settings shared by every ka target, through one interface target (ka_warnings).

if(KA_ENABLE_CCACHE)
  find_program(KA_CCACHE ccache)
  if(KA_CCACHE)
    # pch_defines/time_macros let ccache serve precompiled-header builds.
    set(_ka_launcher ${CMAKE_COMMAND} -E env
        CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
        ${KA_CCACHE})
    set(CMAKE_C_COMPILER_LAUNCHER ${_ka_launcher})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${_ka_launcher})
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${KA_CCACHE})
  endif()
endif()

add_library(ka_warnings INTERFACE)
add_library(ka::warnings ALIAS ka_warnings)
set(_ka_warn -Wall -Wextra -Wpedantic -Wshadow -Wconversion)
if(KA_ENABLE_WERROR)
  list(APPEND _ka_warn -Werror)
endif()
target_compile_options(ka_warnings INTERFACE
  "$<$<COMPILE_LANGUAGE:CXX>:${_ka_warn}>")

if(KA_ENABLE_TSAN)
  if(KA_ENABLE_SANITIZERS)
    message(FATAL_ERROR "KA_ENABLE_TSAN and KA_ENABLE_SANITIZERS (ASan) cannot be combined")
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX,C>:-fsanitize=thread;-fno-omit-frame-pointer>")
  add_link_options(-fsanitize=thread)
endif()

if(KA_ENABLE_SANITIZERS)
  set(_ka_san -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX,C>:${_ka_san}>")
  add_link_options(${_ka_san})
  # GCC 12's -Wmaybe-uninitialized fires inside libstdc++ (std::regex's NFA, std::function)
  # once ASan/UBSan instrument the code: false positives in headers we do not own. The ci
  # preset keeps the warning (and -Werror) on the uninstrumented build, where it is reliable.
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-Wno-maybe-uninitialized>")
endif()
