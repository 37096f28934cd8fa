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
  set(have_mpi OFF)
  if(KILN_MPI)
    find_package(MPI QUIET COMPONENTS C)
    if(MPI_C_FOUND)
      set(have_mpi ON)
    endif()
  endif()
  set(have_nccl OFF)
  if(KILN_NCCL AND have_cuda AND have_mpi)  # NCCL's ranks find each other through MPI
    find_library(KILN_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
    find_path(KILN_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    if(KILN_NCCL_LIBRARY AND KILN_NCCL_INCLUDE_DIR)
      set(have_nccl ON)
    endif()
  endif()
  set(KILN_HAVE_CUDA ${have_cuda} PARENT_SCOPE)
  set(KILN_HAVE_VULKAN ${have_vulkan} PARENT_SCOPE)
  set(KILN_HAVE_MPI ${have_mpi} PARENT_SCOPE)
  set(KILN_MPI_LIBRARIES ${MPI_C_LIBRARIES} PARENT_SCOPE)
  set(KILN_HAVE_NCCL ${have_nccl} PARENT_SCOPE)
endfunction()

# kiln_cuda_architectures(): CMAKE_CUDA_ARCHITECTURES when unset. That is the GPUs of this
# machine (the compute capabilities nvidia-smi reports: 90 for an H100) or, with no GPU here,
# Ampere and Hopper: 80-real and 90. sm_80 code runs on every 8.x GPU (A100, A10, RTX 30 and 40), and
# "90" holds sm_90 code for H100 and H200 plus PTX that newer GPUs compile when they load kiln. The
# kernels need 8.0 or newer (TF32 mma.sync, cp.async): an older architecture is refused.
# KILN_CUDA_HOPPER says whether the list has Hopper, for which the wgmma kernel is also built as
# sm_90a (kernels/cuda/CMakeLists.txt).
function(kiln_cuda_architectures)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    execute_process(COMMAND nvidia-smi --query-gpu=compute_cap --format=csv,noheader
                    OUTPUT_VARIABLE caps RESULT_VARIABLE rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    set(archs "")
    if(rc EQUAL 0 AND caps MATCHES "^[0-9]")
      string(REPLACE "\n" ";" caps "${caps}")
      foreach(cap IN LISTS caps)
        string(STRIP "${cap}" cap)
        string(REPLACE "." "" cap "${cap}")
        list(APPEND archs ${cap})
      endforeach()
      list(REMOVE_DUPLICATES archs)
      set(why "this machine's GPUs")
    else()
      set(archs 80-real 90)
      set(why "no GPU here: Ampere and Hopper")
    endif()
    message(STATUS "CUDA architectures: ${archs} (${why}; -DCMAKE_CUDA_ARCHITECTURES=... for others)")
    set(CMAKE_CUDA_ARCHITECTURES ${archs} PARENT_SCOPE)
  else()
    set(archs ${CMAKE_CUDA_ARCHITECTURES})
  endif()
  set(hopper OFF)
  foreach(arch IN LISTS archs)
    if(arch MATCHES "^(native|all|all-major)$" OR arch MATCHES "^9")
      set(hopper ON)
    elseif(arch MATCHES "^([0-9]+)" AND CMAKE_MATCH_1 LESS 80)
      message(FATAL_ERROR "CMAKE_CUDA_ARCHITECTURES has ${arch}, but kiln's CUDA kernels need compute capability "
                          "8.0 or newer (TF32 tensor cores, cp.async): build for 80 or later, or with -DKILN_CUDA=OFF")
    endif()
  endforeach()
  set(KILN_CUDA_HOPPER ${hopper} PARENT_SCOPE)
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

# kiln_add_layer(NAME [DEPENDS LAYER...]): the object library kiln_NAME for the folder NAME, whose
# objects go into kiln. Its code sees <kiln/NAME/...> and the headers of the layers it depends on
# (and theirs), through an include folder of its own that holds only kiln/NAME: an include of a
# layer it does not depend on fails to compile.
function(kiln_add_layer name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "DEPENDS")
  set(root ${PROJECT_BINARY_DIR}/layer-include/${name})
  file(MAKE_DIRECTORY ${root}/kiln)
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${name} ${root}/kiln/${name} SYMBOLIC)
  add_library(kiln_${name} OBJECT)
  target_include_directories(kiln_${name} PUBLIC ${root})
  foreach(dep IN LISTS arg_DEPENDS)
    target_link_libraries(kiln_${name} PUBLIC kiln_${dep})
  endforeach()
  # position-independent, so that kiln_check_layer_links can link the objects into shared libraries
  set_target_properties(kiln_${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  kiln_set_warnings(kiln_${name})
  target_sources(kiln PRIVATE $<TARGET_OBJECTS:kiln_${name}>)
endfunction()

# kiln_check_layer_links(): each layer's objects linked into a shared library over the layers
# under it and nothing else, with every symbol resolved (--no-undefined): a call into a layer
# above it (or into one beside it) fails to link, at build time. core and kernels link as one
# floor, since core's backend_for is defined by kernels/registry.cpp. The libraries are checks
# only: nothing uses or installs them.
function(kiln_check_layer_links)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    return()
  endif()
  add_library(kiln_links_floor SHARED $<TARGET_OBJECTS:kiln_core> $<TARGET_OBJECTS:kiln_kernels>)
  target_link_libraries(kiln_links_floor PRIVATE Threads::Threads spdlog::spdlog ${CMAKE_DL_LIBS})
  if(KILN_HAVE_CUDA)
    target_link_libraries(kiln_links_floor PRIVATE CUDA::cudart_static)
  endif()
  if(KILN_HAVE_MPI)
    target_link_libraries(kiln_links_floor PRIVATE MPI::MPI_C)
  endif()
  if(KILN_HAVE_NCCL)
    target_link_libraries(kiln_links_floor PRIVATE ${KILN_NCCL_LIBRARY})
  endif()
  add_library(kiln_links_autograd SHARED $<TARGET_OBJECTS:kiln_autograd>)
  target_link_libraries(kiln_links_autograd PUBLIC kiln_links_floor)
  foreach(layer layers optim datasets)
    add_library(kiln_links_${layer} SHARED $<TARGET_OBJECTS:kiln_${layer}>)
    target_link_libraries(kiln_links_${layer} PRIVATE kiln_links_autograd)
  endforeach()
  target_link_libraries(kiln_links_datasets PRIVATE ZLIB::ZLIB)
  foreach(check floor autograd layers optim datasets)
    set_target_properties(kiln_links_${check} PROPERTIES LINKER_LANGUAGE CXX)
    target_link_options(kiln_links_${check} PRIVATE LINKER:--no-undefined)
  endforeach()
endfunction()

# kiln_add_test(NAME LABEL src...): a doctest executable whose every case is a CTest test of its
# own, "NAME: case name", under LABEL (cpu, vulkan or cuda), so that CI runs what its machine can,
# the device runs the rest, and a failure names its case. cmake/kiln_list_tests.py lists the cases
# after each build. A case that skips itself (tests/skip.h: a GPU, the MNIST files or PyTorch
# missing) exits with 77, which CTest reports as skipped. The cases of the doctest suite "slow" are
# also labelled slow, and the sanitizer build leaves them out; the target property
# KILN_SUITE_LABELS ("SUITE=LABEL;...") labels other suites' cases likewise.
function(kiln_add_test name label)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE kiln::kiln kiln_doctest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})  # "tests/..." and "apps/..."
  target_compile_definitions(${name} PRIVATE KILN_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data")
  kiln_set_warnings(${name})
  set(listed ${CMAKE_CURRENT_BINARY_DIR}/${name}_cases.cmake)
  add_custom_command(TARGET ${name} POST_BUILD
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/cmake/kiln_list_tests.py $<TARGET_FILE:${name}> ${name}
            ${label} ${listed} "$<TARGET_PROPERTY:${name},KILN_SUITE_LABELS>"
    BYPRODUCTS ${listed} VERBATIM COMMAND_EXPAND_LISTS)
  # what CTest reads: the list once the binary is built, else a test that says it is not
  set(include ${CMAKE_CURRENT_BINARY_DIR}/${name}_include.cmake)
  file(WRITE ${include} "if(EXISTS [[${listed}]])\n  include([[${listed}]])\nelse()\n"
                        "  add_test(${name}_NOT_BUILT ${name}_NOT_BUILT)\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${include})
endfunction()

# kiln_add_device_test(NAME src...): a test binary of the device backends. Its main,
# tests/device_main.cpp, takes --backend=NAME and exits with 77 where the backend has no device (a
# machine without a GPU), which CTest reports as skipped (SKIP_RETURN_CODE); under CI=true a
# missing Vulkan device fails (CI installs lavapipe).
function(kiln_add_device_test name)
  add_executable(${name} ${PROJECT_SOURCE_DIR}/tests/device_main.cpp ${PROJECT_SOURCE_DIR}/tests/skip.cpp ${ARGN})
  target_link_libraries(${name} PRIVATE kiln::kiln doctest::doctest)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})  # "tests/..."
  kiln_set_warnings(${name})
endfunction()
# kiln_add_device_run(TEST BINARY BACKEND [NEEDS NEED]): TEST runs BINARY on BACKEND under the
# label BACKEND: the cases of the doctest suite "needs-NEED" (a feature some devices lack: they
# skip themselves without it), or without NEEDS every case but those of the suites "needs-*". Vulkan's
# with the validation layer on, its synchronization checks too (a missing barrier is a message, and
# a message fails the case).
function(kiln_add_device_run test binary backend)
  cmake_parse_arguments(PARSE_ARGV 3 arg "" "NEEDS" "")
  set(suites --test-suite-exclude=needs-*)
  if(arg_NEEDS)
    set(suites --test-suite=needs-${arg_NEEDS})
  endif()
  add_test(NAME ${test} COMMAND ${binary} --backend=${backend} ${suites})
  set_tests_properties(${test} PROPERTIES LABELS ${backend} SKIP_RETURN_CODE 77)
  if(backend STREQUAL "vulkan")
    set_tests_properties(${test} PROPERTIES ENVIRONMENT
      "KILN_VULKAN_VALIDATION=1;VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT")
  endif()
endfunction()

# `cmake --install` puts the library (component runtime for libkiln.so, dev for libkiln.a), its headers (include/kiln/kiln.h and include/kiln/<layer>/...;
# the kernels' headers and autograd/ops/, which are the library's own, stay out) and a CMake
# package, so that an outside project's find_package(kiln CONFIG REQUIRED) and
# target_link_libraries(app PRIVATE kiln::kiln) work, with only include/ on its include path (all
# component dev; cmake/KilnPackage.cmake adds kiln.pc and the Debian packages).
function(kiln_install_package)
  include(CMakePackageConfigHelpers)
  install(TARGETS kiln EXPORT kilnTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev)
  foreach(layer core autograd layers optim datasets)
    install(DIRECTORY ${PROJECT_SOURCE_DIR}/${layer}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln/${layer}
      COMPONENT dev FILES_MATCHING PATTERN "*.h" PATTERN "ops" EXCLUDE)
  endforeach()
  install(FILES ${PROJECT_BINARY_DIR}/include/kiln/kiln.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln COMPONENT dev)
  set(config_dir ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
  install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${config_dir} COMPONENT dev)
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kilnConfig.cmake.in
    ${PROJECT_BINARY_DIR}/kilnConfig.cmake INSTALL_DESTINATION ${config_dir})
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
    COMPATIBILITY SameMinorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/kilnConfig.cmake ${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
    DESTINATION ${config_dir} COMPONENT dev)
endfunction()

# kiln_install_program(program component "what it does"): installs the program into bin/ and, where
# Debian's help2man is there, its man page made from its --help and --version, gzip'd as Debian's
# policy asks (-9n: no name or time stamp, so a rebuild is the same file). The program runs at
# build time with --help, so --help must not need a device.
function(kiln_install_program program component what)
  install(TARGETS ${program} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT ${component})
  find_program(KILN_HELP2MAN help2man)
  find_program(KILN_GZIP gzip)
  if(NOT KILN_HELP2MAN OR NOT KILN_GZIP)
    message(STATUS "help2man or gzip not found: no man page for ${program} (scripts/setup installs help2man)")
    return()
  endif()
  set(page ${CMAKE_CURRENT_BINARY_DIR}/${program}.1)
  add_custom_command(OUTPUT ${page}.gz
    COMMAND ${KILN_HELP2MAN} --no-info --version-string=${PROJECT_VERSION} --name=${what} --output=${page}
            $<TARGET_FILE:${program}>
    COMMAND ${KILN_GZIP} -9nf ${page}
    DEPENDS ${program} COMMENT "help2man ${program}" VERBATIM)
  add_custom_target(${program}-man ALL DEPENDS ${page}.gz)
  install(FILES ${page}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT ${component})
endfunction()
