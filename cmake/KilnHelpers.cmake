# Helpers shared by kiln's CMake files.

# Decide which optional backends this build can have. Each KILN_<X> option asks for a
# backend; KILN_HAVE_<X> says whether its toolkit was found (Vulkan: headers, loader and glslc).
function(kiln_detect_backends)
  set(have_cuda OFF)
  if(KILN_CUDA)
    find_package(CUDAToolkit QUIET)
    if(CUDAToolkit_FOUND)
      set(have_cuda ON)
    endif()
  endif()
  set(have_vulkan OFF)
  if(KILN_VULKAN)
    find_package(Vulkan QUIET)
    find_program(KILN_GLSLC NAMES glslc HINTS ${Vulkan_GLSLC_EXECUTABLE})
    if(Vulkan_FOUND AND KILN_GLSLC)
      set(have_vulkan ON)
    endif()
  endif()
  set(have_nccl OFF)
  if(KILN_NCCL AND have_cuda)
    find_library(KILN_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
    if(KILN_NCCL_LIBRARY)
      set(have_nccl ON)
    endif()
  endif()
  set(KILN_HAVE_CUDA ${have_cuda} PARENT_SCOPE)
  set(KILN_HAVE_VULKAN ${have_vulkan} PARENT_SCOPE)
  set(KILN_HAVE_NCCL ${have_nccl} PARENT_SCOPE)
endfunction()

function(kiln_set_warnings target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion>
      $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
    if(KILN_WERROR)
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>
        $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
    endif()
  endif()
endfunction()

# kiln_add_test(NAME LABEL src...): a doctest executable registered with CTest under LABEL
# (cpu, vulkan or cuda), so CI runs what its machine can and the device runs the rest.
function(kiln_add_test name label)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE kiln::kiln kiln_doctest_main)
  target_compile_definitions(${name} PRIVATE KILN_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data")
  kiln_set_warnings(${name})
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS ${label})
endfunction()

# `cmake --install` puts the library, its headers (include/kiln/<layer>/...) and a CMake package,
# so that an outside project's find_package(kiln CONFIG REQUIRED) and
# target_link_libraries(app PRIVATE kiln::kiln) work.
function(kiln_install_package)
  include(CMakePackageConfigHelpers)
  install(TARGETS kiln EXPORT kilnTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  foreach(layer core autograd layers optim datasets)
    install(DIRECTORY ${PROJECT_SOURCE_DIR}/${layer}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln/${layer}
      FILES_MATCHING PATTERN "*.h" PATTERN "ops_common.h" EXCLUDE)
  endforeach()
  set(config_dir ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
  install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${config_dir})
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kilnConfig.cmake.in
    ${PROJECT_BINARY_DIR}/kilnConfig.cmake INSTALL_DESTINATION ${config_dir})
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
    COMPATIBILITY SameMinorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/kilnConfig.cmake ${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
    DESTINATION ${config_dir})
endfunction()
