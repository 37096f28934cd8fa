# What `cmake --install` and `cpack` make of a build, in three components:
#   runtime  libkiln.so.MAJOR.MINOR (BUILD_SHARED_LIBS=ON), mnist-train, mnist-predict, their man pages
#   dev      the headers, libkiln.so or libkiln.a, the CMake package (find_package(kiln)) and kiln.pc
#   bench    kernel-bench (CUDA builds), cpu-bench, vulkan-bench, dist-bench
# `cpack -G DEB` (scripts/package) turns them into the Debian packages kiln, kiln-dev and kiln-bench,
# whose dependencies dpkg-shlibdeps reads from the binaries: the Debian packages they load.

# ---- pkg-config ----
file(RELATIVE_PATH KILN_PC_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
set(KILN_PC_REQUIRES_PRIVATE "spdlog zlib")
# What a static libkiln.a needs besides (pkg-config --static): the backends' libraries
set(KILN_PC_LIBS_PRIVATE "${CMAKE_DL_LIBS}")
list(TRANSFORM KILN_PC_LIBS_PRIVATE PREPEND "-l")
if(KILN_HAVE_CUDA AND NOT BUILD_SHARED_LIBS)
  # the CUDA runtime is linked into libkiln.so; only a static libkiln.a leaves it to the program, and
  # names the toolkit's folder of this machine (no path of this kind may go into a package: lintian)
  get_target_property(cudart CUDA::cudart_static IMPORTED_LOCATION)
  get_filename_component(cudart_dir "${cudart}" DIRECTORY)
  list(APPEND KILN_PC_LIBS_PRIVATE "-L${cudart_dir}" -lcudart_static -lrt)
endif()
if(KILN_HAVE_MPI)
  list(APPEND KILN_PC_LIBS_PRIVATE ${KILN_MPI_LIBRARIES})
endif()
if(KILN_HAVE_NCCL)
  list(APPEND KILN_PC_LIBS_PRIVATE ${KILN_NCCL_LIBRARY})
endif()
list(JOIN KILN_PC_LIBS_PRIVATE " " KILN_PC_LIBS_PRIVATE)
configure_file(${PROJECT_SOURCE_DIR}/cmake/kiln.pc.in ${PROJECT_BINARY_DIR}/kiln.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/kiln.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime)

# ---- Debian packages ----
set(KILN_PACKAGE_CONTACT "the kiln authors <kiln@kiln.invalid>" CACHE STRING
    "Maintainer of the Debian packages: whoever builds and ships them (the default's address is invalid)")
set(CPACK_PACKAGE_NAME kiln)
set(CPACK_PACKAGE_VENDOR "the kiln authors")
set(CPACK_PACKAGE_CONTACT "${KILN_PACKAGE_CONTACT}")
set(CPACK_STRIP_FILES ON)  # Debian ships stripped binaries
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "neural-network training framework in C++20")
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev bench)
if(KILN_HAVE_CUDA)
  # kernel-bench loads cuBLAS and cuDNN, which come with NVIDIA's CUDA toolkit and are not Debian
  # packages that a .deb could depend on: it is installed by `cmake --install` only.
  list(REMOVE_ITEM CPACK_COMPONENTS_ALL bench)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# where dpkg-shlibdeps finds libkiln.so for the programs of kiln-bench and kiln-dev, which load it from
# the kiln package (their dependency on it is the components' below)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR})
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME kiln)
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION
  "neural-network training framework in C++20 (library and MNIST programs)
 kiln trains neural networks on CUDA GPUs, Vulkan devices or the CPU:
 tensors, reverse-mode autograd, layers and optimizers. This package holds
 the shared library, and mnist-train and mnist-predict.")
# libkiln.so's shlibs file (so packages built against it depend on kiln >= this version; only
# kiln holds a shared library) and the ldconfig trigger that Debian's policy asks of it (CPack's
# postinst and postrm call ldconfig too, which lintian only warns about)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
file(WRITE ${PROJECT_BINARY_DIR}/debian/triggers "activate-noawait ldconfig\n")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA ${PROJECT_BINARY_DIR}/debian/triggers)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_RECOMMENDS "libvulkan1, mesa-vulkan-drivers")  # the Vulkan backend opens the loader at run time
set(CPACK_DEBIAN_DEV_PACKAGE_NAME kiln-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_DESCRIPTION
  "neural-network training framework in C++20 (headers, CMake, pkg-config)
 What a C++ program needs to build against kiln: find_package(kiln) with
 kiln::kiln, or pkg-config --cflags --libs kiln.")
# find_package(kiln) finds these too (cmake/kilnConfig.cmake.in), and kiln.pc requires spdlog and zlib
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libspdlog-dev, zlib1g-dev")
if(KILN_HAVE_VULKAN)
  string(APPEND CPACK_DEBIAN_DEV_PACKAGE_DEPENDS ", libvulkan-dev")  # find_dependency(Vulkan): its headers
endif()
set(CPACK_DEBIAN_BENCH_PACKAGE_NAME kiln-bench)
set(CPACK_DEBIAN_BENCH_DESCRIPTION
  "neural-network training framework in C++20 (benchmarks)
 cpu-bench, vulkan-bench and dist-bench: kiln's kernels and collectives timed.")
# the packages' dependencies on one another, versioned
set(CPACK_COMPONENT_DEV_DEPENDS runtime)
set(CPACK_COMPONENT_BENCH_DEPENDS runtime)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
# Each package's /usr/share/doc/PACKAGE: copyright (Debian's machine-readable form of LICENSE) and
# changelog.gz, as Debian's policy asks of every package (lintian checks both)
file(READ ${PROJECT_SOURCE_DIR}/LICENSE license)
string(REGEX MATCH "Copyright \\(c\\) ([^\n]*)" _ "${license}")
set(KILN_COPYRIGHT "${CMAKE_MATCH_1}")
string(REGEX REPLACE "^MIT License\n\n[^\n]*\n\n" "" license "${license}")
string(REGEX REPLACE "\n\n" "\n.\n" license "${license}")
string(STRIP "${license}" license)
string(REPLACE "\n" "\n " KILN_LICENSE_TEXT " ${license}")  # continuation lines start with a space
configure_file(${PROJECT_SOURCE_DIR}/cmake/debian/copyright.in ${PROJECT_BINARY_DIR}/debian/copyright @ONLY)
string(TIMESTAMP KILN_CHANGELOG_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)  # SOURCE_DATE_EPOCH when set
configure_file(${PROJECT_SOURCE_DIR}/cmake/debian/changelog.in ${PROJECT_BINARY_DIR}/debian/changelog @ONLY)
find_program(KILN_GZIP gzip REQUIRED)
execute_process(COMMAND ${KILN_GZIP} -9nf ${PROJECT_BINARY_DIR}/debian/changelog COMMAND_ERROR_IS_FATAL ANY)
foreach(component_and_package runtime:kiln dev:kiln-dev bench:kiln-bench)
  string(REPLACE ":" ";" pair "${component_and_package}")
  list(GET pair 0 component)
  list(GET pair 1 package)
  install(FILES ${PROJECT_BINARY_DIR}/debian/copyright ${PROJECT_BINARY_DIR}/debian/changelog.gz
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${package} COMPONENT ${component})
endforeach()

include(CPack)
