# Helpers shared by every room.
set(GEMMA_ROOT ${CMAKE_CURRENT_SOURCE_DIR})
set(GEMMA_WARNINGS -Wall -Wextra -Wno-unused-parameter)
# Test code (not the libraries it tests) is compiled at -Og: the tests' time goes into the
# libraries, and -O2 on the gtest-heavy test files cost ~35% more compile time (bench/journal/
# 2026-12-02-ci-build-time.md). Empty keeps the build type's level.
set(GEMMA_TEST_OPT "-Og" CACHE STRING "Optimisation flag for test code (empty: the build type's)")
# Position-independent objects (they also make the shared product library) without the cost of
# assuming that global functions may be interposed: calls inside the library stay direct.
if(NOT GEMMA_WEB)  # clang for wasm32 ignores it (and says so per file)
  add_compile_options(-fno-semantic-interposition)
endif()

# gemma_library(NAME SOURCES a.cc b.cc DEPS x y)
function(gemma_library name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${A_SOURCES})
  target_include_directories(${name} PUBLIC ${GEMMA_ROOT}/include ${GEMMA_ROOT}/src)
  target_compile_options(${name} PRIVATE ${GEMMA_WARNINGS})
  target_link_libraries(${name} PUBLIC ${A_DEPS})
endfunction()

# gemma_test(NAME SOURCES a_test.cc DEPS lib [LABEL l] [SLOW_FILTER gtest-filter]) -> a gtest
# binary registered with ctest. One label per test tiers the suite: LABEL (default "unit") for the
# binary's tests, "slow" for those matching SLOW_FILTER (a --gtest_filter pattern). The README's
# test command (= CI) runs `ctest -LE slow`; bench/run_slow_tests.sh runs `ctest -L slow` on the
# GPU machine. (One label each: gtest_discover_tests would split a list of labels into separate
# properties.) The CI tier runs Mesa's lavapipe with one thread per test (LP_NUM_THREADS=1):
# `ctest -j2` already keeps both cores busy, and lavapipe's own worker threads on top of that made
# the `vulkan` label's run 206 s instead of 182 s on 2 cores (2026-12-04).
function(gemma_test name)
  if(NOT GEMMA_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(A "" "SLOW_FILTER;LABEL" "SOURCES;DEPS" ${ARGN})
  if(NOT A_LABEL)
    set(A_LABEL unit)
  endif()
  add_executable(${name} ${A_SOURCES})
  target_include_directories(${name} PRIVATE ${GEMMA_ROOT}/include ${GEMMA_ROOT}/src)
  target_compile_options(${name} PRIVATE ${GEMMA_WARNINGS} ${GEMMA_TEST_OPT})
  target_compile_definitions(${name} PRIVATE GEMMA_SOURCE_DIR="${GEMMA_ROOT}"
                                             GEMMA_BINARY_DIR="${CMAKE_BINARY_DIR}")
  if(GEMMA_SANITIZE)
    # (tests whose bounds measure RSS or time relax them: docs/reliability.md, "Sanitizer builds")
    target_compile_definitions(${name} PRIVATE GEMMA_SANITIZED=1)
  endif()
  target_link_libraries(${name} PRIVATE ${A_DEPS} GTest::gtest GTest::gtest_main)
  set(env LP_NUM_THREADS=1)
  if(GEMMA_SANITIZE MATCHES "thread")  # (no Vulkan in these builds: docs/reliability.md)
    set(env "TSAN_OPTIONS=suppressions=${GEMMA_ROOT}/tests/tsan.supp")
  endif()
  if(A_SLOW_FILTER)
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 TEST_FILTER "-${A_SLOW_FILTER}"
                         PROPERTIES TIMEOUT 900 LABELS ${A_LABEL} ENVIRONMENT ${env})
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 TEST_FILTER "${A_SLOW_FILTER}"
                         PROPERTIES TIMEOUT 3600 LABELS slow)
  else()
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
                         PROPERTIES TIMEOUT 900 LABELS ${A_LABEL} ENVIRONMENT ${env})
  endif()
endfunction()

# gemma_node_test(NAME SCRIPT file.mjs [DEPENDS targets...] [NODE_ARGS args...]) -> a Node.js test script registered
# with ctest, label "web" (web/test/). The script gets GEMMA_SOURCE_DIR, GEMMA_BINARY_DIR,
# GEMMA_WEB_BUILD_DIR and, per DEPENDS target, GEMMA_BIN_<TARGET> (its path) in the environment;
# exit status 77 is a skip (the WebAssembly build is absent).
function(gemma_node_test name)
  if(NOT GEMMA_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(A "" "SCRIPT;COST" "DEPENDS;NODE_ARGS" ${ARGN})
  find_program(GEMMA_NODE node)
  if(NOT GEMMA_NODE)
    return()
  endif()
  set(env GEMMA_SOURCE_DIR=${GEMMA_ROOT} GEMMA_BINARY_DIR=${CMAKE_BINARY_DIR}
          GEMMA_WEB_BUILD_DIR=${GEMMA_WEB_BUILD_DIR})
  foreach(t ${A_DEPENDS})
    if(TARGET ${t})
      string(MAKE_C_IDENTIFIER ${t} id)
      string(TOUPPER ${id} id)
      list(APPEND env GEMMA_BIN_${id}=$<TARGET_FILE:${t}>)
    endif()
  endforeach()
  add_test(NAME ${name} COMMAND ${GEMMA_NODE} ${A_NODE_ARGS} ${CMAKE_CURRENT_SOURCE_DIR}/${A_SCRIPT})
  set_tests_properties(${name} PROPERTIES LABELS web TIMEOUT 300 SKIP_RETURN_CODE 77
                                          ENVIRONMENT "${env}")
  if(A_COST)
    set_tests_properties(${name} PROPERTIES COST ${A_COST})
  endif()
endfunction()
