# The WebAssembly build's settings (included by the top-level CMakeLists.txt when the Emscripten
# toolchain is in use; tools/build-web.sh configures it). docs/web.md.
#
# Emscripten's sysroot holds only its own libc/libc++; the header-only libraries the rooms use
# (nlohmann-json, Highway) come from Debian's /usr/include through a staging directory that holds
# just them, so no glibc header can leak into a wasm32 compile.
set(GEMMA_BUILD_TESTS OFF CACHE BOOL "" FORCE)
set(GEMMA_VULKAN OFF CACHE BOOL "" FORCE)
# The rooms above the backend seam (the server room gives only its request parsing).
set(GEMMA_ROOMS "core;format;model;backend;tokenizer;chat;decode;constrain;media;runtime;server")
option(GEMMA_WEB_THREADS "pthreads (a cross-origin isolated page: COOP/COEP)" OFF)
option(GEMMA_WEB_SIMD "WebAssembly SIMD (-msimd128: the compiler vectorizes the reference kernels)" ON)

set(GEMMA_WEB_SYSINC ${CMAKE_BINARY_DIR}/sysinc)
file(MAKE_DIRECTORY ${GEMMA_WEB_SYSINC})
foreach(dir nlohmann hwy)
  if(NOT EXISTS /usr/include/${dir})
    message(FATAL_ERROR "/usr/include/${dir} is missing: bash tools/setup.sh")
  endif()
  file(CREATE_LINK /usr/include/${dir} ${GEMMA_WEB_SYSINC}/${dir} SYMBOLIC)
endforeach()

add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED GLOBAL)
target_include_directories(nlohmann_json::nlohmann_json SYSTEM INTERFACE ${GEMMA_WEB_SYSINC})
add_library(Threads::Threads INTERFACE IMPORTED GLOBAL)

# C++20 library parts that Emscripten 3.1.6's libc++ lacks: one directory of shims
# (src/core/compat/web), first on every include path.
include_directories(BEFORE SYSTEM ${CMAKE_CURRENT_LIST_DIR}/../src/core/compat/web)
# gemma::Error is an exception: Emscripten ignores exceptions unless asked.
add_compile_options(-fexceptions)
add_link_options(-fexceptions)
if(GEMMA_WEB_THREADS)
  add_compile_options(-pthread)
  add_link_options(-pthread)
endif()
if(GEMMA_WEB_SIMD)
  add_compile_options(-msimd128)
endif()
