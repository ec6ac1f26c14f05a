# Sanitizer builds and libFuzzer targets. Included by CMakeLists.txt after the RUNPATH
# setup and before any target, so every target of the build is instrumented alike:
# the op libraries, the runner core, aoti_runner, contract_vectors and the Triton
# backend (libtorch itself is not: it comes from the wheel).
#
#   cmake -S . -B build-asan -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
#     -DPython3_EXECUTABLE=.venv/bin/python \
#     -DAOTI_DEPLOY_SANITIZE=address,undefined -DAOTI_DEPLOY_FUZZ=ON
#   cmake --build build-asan -j2
#
# (./scripts/sanitize.sh and ./scripts/fuzz.sh do this.) With clang the runtime is the
# shared one (-shared-libasan) everywhere, so an instrumented library can be loaded by
# a process that was not built with ASan (python, tritonserver) once that process
# preloads the runtime, and a child it starts (aoti_runner) uses the same runtime.
# The build writes sanitizer_env.sh into the build folder: it exports
# AOTI_DEPLOY_ASAN_RUNTIME (the library to LD_PRELOAD), ASAN_OPTIONS and UBSAN_OPTIONS
# as the process tests run them (scripts/sanitize.sh).
include_guard(GLOBAL)

set(AOTI_DEPLOY_SANITIZE "" CACHE STRING
    "Sanitizers for every target, e.g. address,undefined (empty: none)")
option(AOTI_DEPLOY_FUZZ "Build the libFuzzer targets of cpp_runtime/fuzz (clang, with AOTI_DEPLOY_SANITIZE)" OFF)

set(AOTI_DEPLOY_SANITIZER_FLAGS "")
if(AOTI_DEPLOY_SANITIZE)
  string(REPLACE "," ";" _aoti_deploy_sanitizers "${AOTI_DEPLOY_SANITIZE}")
  foreach(_sanitizer IN LISTS _aoti_deploy_sanitizers)
    if(NOT _sanitizer MATCHES "^(address|undefined)$")
      message(FATAL_ERROR "AOTI_DEPLOY_SANITIZE takes address and/or undefined, got '${_sanitizer}'")
    endif()
  endforeach()
  set(AOTI_DEPLOY_SANITIZER_FLAGS
    -fsanitize=${AOTI_DEPLOY_SANITIZE}
    # Every report is fatal: a test or a fuzzer cannot pass over one.
    -fno-sanitize-recover=all
    -fno-omit-frame-pointer
    -g)
  set(_link_flags "")
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    set(_link_flags -shared-libasan)
    # clang's OpenMP is libomp, while torch ships and loads libgomp: rather than a
    # second OpenMP runtime in the process, the op library's at::parallel_for runs
    # serially in this build (the same results; CMakeLists.txt reads this).
    set(AOTI_DEPLOY_SERIAL_OPS ON)
    # UBSan's vptr check needs the type info of every polymorphic class it meets,
    # libtorch's included; libtorch's are in the uninstrumented wheel and the check
    # reports its own classes' objects as of the wrong type across that boundary.
    if("undefined" IN_LIST _aoti_deploy_sanitizers)
      list(APPEND AOTI_DEPLOY_SANITIZER_FLAGS -fno-sanitize=vptr)
    endif()
    execute_process(
      COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libclang_rt.asan-x86_64.so
      OUTPUT_VARIABLE AOTI_DEPLOY_ASAN_RUNTIME OUTPUT_STRIP_TRAILING_WHITESPACE)
  elseif(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    execute_process(
      COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libasan.so
      OUTPUT_VARIABLE AOTI_DEPLOY_ASAN_RUNTIME OUTPUT_STRIP_TRAILING_WHITESPACE)
  else()
    message(FATAL_ERROR "AOTI_DEPLOY_SANITIZE needs clang or gcc, not ${CMAKE_CXX_COMPILER_ID}")
  endif()
  if(NOT "address" IN_LIST _aoti_deploy_sanitizers)
    set(AOTI_DEPLOY_ASAN_RUNTIME "")
  elseif(NOT EXISTS "${AOTI_DEPLOY_ASAN_RUNTIME}")
    message(FATAL_ERROR "the shared ASan runtime was not found (${AOTI_DEPLOY_ASAN_RUNTIME}); "
                        "Debian: apt-get install libclang-rt-14-dev (clang) or libgcc-12-dev (gcc)")
  endif()
  add_compile_options(${AOTI_DEPLOY_SANITIZER_FLAGS})
  add_link_options(${AOTI_DEPLOY_SANITIZER_FLAGS} ${_link_flags})
  if(AOTI_DEPLOY_ASAN_RUNTIME)
    # Executables find the shared runtime through their RUNPATH, beside libtorch's.
    get_filename_component(_asan_runtime_dir "${AOTI_DEPLOY_ASAN_RUNTIME}" DIRECTORY)
    list(APPEND CMAKE_INSTALL_RPATH "${_asan_runtime_dir}")
  endif()
  # Leak checking is off for the process tests: python and libtorch (neither is
  # instrumented) keep registries and caches until exit by design, so a leak report
  # there names their allocations, not ours. The fuzzers check leaks (scripts/fuzz.sh).
  set(_suppressions "${CMAKE_CURRENT_LIST_DIR}/ubsan.supp")
  file(WRITE "${CMAKE_BINARY_DIR}/sanitizer_env.sh"
    "# Written by cmake/sanitizers.cmake: source it to run this build's binaries.\n"
    "export AOTI_DEPLOY_ASAN_RUNTIME='${AOTI_DEPLOY_ASAN_RUNTIME}'\n"
    "export ASAN_OPTIONS='detect_leaks=0:abort_on_error=1:halt_on_error=1:allocator_may_return_null=1:"
    "verify_asan_link_order=0'\n"
    "export UBSAN_OPTIONS='print_stacktrace=1:halt_on_error=1:suppressions=${_suppressions}'\n")
  message(STATUS "sanitizers: ${AOTI_DEPLOY_SANITIZE} (runtime ${AOTI_DEPLOY_ASAN_RUNTIME})")
endif()

if(AOTI_DEPLOY_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "AOTI_DEPLOY_FUZZ needs clang (libFuzzer): -DCMAKE_CXX_COMPILER=clang++")
  endif()
  if(NOT AOTI_DEPLOY_SANITIZE)
    message(FATAL_ERROR "AOTI_DEPLOY_FUZZ needs -DAOTI_DEPLOY_SANITIZE=address,undefined")
  endif()
  # Coverage feedback from the code under test (the core, the backend's request reader),
  # not only from the fuzz targets; libFuzzer's main is linked into the targets alone.
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
