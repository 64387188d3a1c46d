# The installed product: one library (libgemma-engine.a and libgemma-engine.so) holding every room
# a user's program needs, the public headers, a CMake package (find_package(gemma-engine)) and a
# pkg-config file. Rooms stay separate static libraries inside the build; the product library is
# made from their objects.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The rooms behind the public headers (the server and hub rooms serve the CLI; they have no
# public API yet).
set(GEMMA_PRODUCT_ROOMS gemma_core gemma_format gemma_model gemma_backend gemma_cpu_fast
    gemma_vulkan gemma_tokenizer gemma_chat gemma_decode gemma_constrain gemma_media gemma_runtime)
set(GEMMA_PRODUCT_OBJECTS)
set(GEMMA_PRODUCT_HAS_HWY OFF)
set(GEMMA_PRODUCT_HAS_VULKAN OFF)
foreach(room ${GEMMA_PRODUCT_ROOMS})
  if(TARGET ${room})
    list(APPEND GEMMA_PRODUCT_OBJECTS $<TARGET_OBJECTS:${room}>)
  endif()
endforeach()
if(TARGET gemma_cpu_fast)
  set(GEMMA_PRODUCT_HAS_HWY ON)
endif()
if(TARGET gemma_vulkan)
  set(GEMMA_PRODUCT_HAS_VULKAN ON)
  find_package(Vulkan REQUIRED)
endif()

find_package(OpenSSL REQUIRED)
foreach(kind STATIC SHARED)
  string(TOLOWER ${kind} k)
  set(t gemma_engine_${k})
  add_library(${t} ${kind} ${GEMMA_PRODUCT_OBJECTS})
  set_target_properties(${t} PROPERTIES OUTPUT_NAME gemma-engine LINKER_LANGUAGE CXX
                                        VERSION ${PROJECT_VERSION} SOVERSION 0)
  target_include_directories(${t} PUBLIC $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(${t} PUBLIC Threads::Threads nlohmann_json::nlohmann_json)
  # Image decoding (libwebp), audio decoding and resampling (libsndfile, libsamplerate) and the
  # media digests (OpenSSL's libcrypto).
  target_link_libraries(${t} PRIVATE $<BUILD_INTERFACE:PkgConfig::WEBP> $<INSTALL_INTERFACE:webp>
                                     $<BUILD_INTERFACE:PkgConfig::SNDFILE>
                                     $<INSTALL_INTERFACE:sndfile> $<INSTALL_INTERFACE:samplerate>
                                     $<BUILD_INTERFACE:OpenSSL::Crypto> $<INSTALL_INTERFACE:crypto>)
  if(GEMMA_PRODUCT_HAS_HWY)
    target_link_libraries(${t} PRIVATE $<BUILD_INTERFACE:PkgConfig::HWY>
                                       $<INSTALL_INTERFACE:hwy>)
  endif()
  if(GEMMA_PRODUCT_HAS_VULKAN)
    target_link_libraries(${t} PRIVATE Vulkan::Vulkan ${CMAKE_DL_LIBS})
  endif()
  foreach(room ${GEMMA_PRODUCT_ROOMS})
    if(TARGET ${room})
      add_dependencies(${t} ${room})
    endif()
  endforeach()
endforeach()
# The static library's users link its dependencies themselves (the package config does that).
set_target_properties(gemma_engine_static PROPERTIES EXPORT_NAME static)
set_target_properties(gemma_engine_shared PROPERTIES EXPORT_NAME shared)

install(TARGETS gemma_engine_static gemma_engine_shared EXPORT gemma-engine-targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${GEMMA_ROOT}/include/gemma DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT gemma-engine-targets NAMESPACE gemma-engine::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/gemma-engine)
configure_package_config_file(${GEMMA_ROOT}/cmake/pkg/gemma-engine-config.cmake.in
  ${CMAKE_BINARY_DIR}/gemma-engine-config.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/gemma-engine)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/gemma-engine-config-version.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/gemma-engine-config.cmake
              ${CMAKE_BINARY_DIR}/gemma-engine-config-version.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/gemma-engine)
set(GEMMA_PC_PRIVATE_LIBS "-lpthread -lwebp -lsndfile -lsamplerate -lcrypto")
if(GEMMA_PRODUCT_HAS_HWY)
  string(APPEND GEMMA_PC_PRIVATE_LIBS " -lhwy")
endif()
if(GEMMA_PRODUCT_HAS_VULKAN)
  string(APPEND GEMMA_PC_PRIVATE_LIBS " -lvulkan -ldl")
endif()
configure_file(${GEMMA_ROOT}/cmake/pkg/gemma-engine.pc.in ${CMAKE_BINARY_DIR}/gemma-engine.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/gemma-engine.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
