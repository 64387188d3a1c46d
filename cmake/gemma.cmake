# Helpers shared by every room.
set(GEMMA_ROOT ${CMAKE_CURRENT_SOURCE_DIR})
set(GEMMA_WARNINGS -Wall -Wextra -Wno-unused-parameter)
# Position-independent objects (they also make the shared product library) without the cost of
# assuming that global functions may be interposed: calls inside the library stay direct.
add_compile_options(-fno-semantic-interposition)

# gemma_library(NAME SOURCES a.cc b.cc DEPS x y)
function(gemma_library name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${A_SOURCES})
  target_include_directories(${name} PUBLIC ${GEMMA_ROOT}/include ${GEMMA_ROOT}/src)
  target_compile_options(${name} PRIVATE ${GEMMA_WARNINGS})
  target_link_libraries(${name} PUBLIC ${A_DEPS})
endfunction()

# gemma_test(NAME SOURCES a_test.cc DEPS lib [LABELS l...] [SLOW_FILTER gtest-filter]) -> a gtest
# binary registered with ctest. Labels tier the suite: every test carries its LABELS (default
# "unit"); tests matching SLOW_FILTER (a --gtest_filter pattern) also carry "slow". The README's
# test command (= CI) runs `ctest -LE slow`; bench/run_slow_tests.sh runs the rest on the GPU
# machine.
function(gemma_test name)
  if(NOT GEMMA_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(A "" "SLOW_FILTER" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT A_LABELS)
    set(A_LABELS unit)
  endif()
  add_executable(${name} ${A_SOURCES})
  target_include_directories(${name} PRIVATE ${GEMMA_ROOT}/include ${GEMMA_ROOT}/src)
  target_compile_options(${name} PRIVATE ${GEMMA_WARNINGS})
  target_compile_definitions(${name} PRIVATE GEMMA_SOURCE_DIR="${GEMMA_ROOT}"
                                             GEMMA_BINARY_DIR="${CMAKE_BINARY_DIR}")
  target_link_libraries(${name} PRIVATE ${A_DEPS} GTest::gtest GTest::gtest_main)
  if(A_SLOW_FILTER)
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 TEST_FILTER "-${A_SLOW_FILTER}"
                         PROPERTIES TIMEOUT 900 LABELS "${A_LABELS}")
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 TEST_FILTER "${A_SLOW_FILTER}"
                         PROPERTIES TIMEOUT 3600 LABELS "${A_LABELS};slow")
  else()
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 900 LABELS "${A_LABELS}")
  endif()
endfunction()
