# cmake -DKILN_BUILD_DIR=... -DKILN_SOURCE_DIR=... -DWORK_DIR=... -DGENERATOR=... -DCONFIG=...
#       -DCXX_COMPILER=... [-DCXX_FLAGS=... -DEXE_LINKER_FLAGS=...] -P install_and_build.cmake
# (tests/install/CMakeLists.txt passes them all, from the build that runs the test.)
#
# Installs the kiln build in KILN_BUILD_DIR into WORK_DIR/prefix, checks that the installed
# package names no path of the source or build tree, builds apps/example against it (its headers
# not as system headers, warnings as errors, so kiln's headers must be clean under -Wall -Wextra)
# and runs the program. Then builds and runs tests/install/consumer, a project with its own core/,
# layers/ and optim/ headers, with a further include folder where the unprefixed name of every
# installed kiln header ("core/shape.h" for include/kiln/core/shape.h) is an #error: a kiln header
# that reached another without the kiln/ prefix would stop that build. Any failing step stops
# the script with that step's output.
foreach(var KILN_BUILD_DIR KILN_SOURCE_DIR WORK_DIR GENERATOR CONFIG CXX_COMPILER)
  if(NOT ${var})
    message(FATAL_ERROR "install_and_build.cmake: -D${var}=... is required")
  endif()
endforeach()

# run(<what> <command>...): runs the command, fails with its output when it fails.
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    string(JOIN " " command ${ARGN})
    message(FATAL_ERROR "${what} failed (${rc}):\n${command}\n${out}")
  endif()
  string(STRIP "${out}" out)
  set(out "${out}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/prefix)
set(build ${WORK_DIR}/build)
set(bin ${WORK_DIR}/bin)
file(REMOVE_RECURSE ${WORK_DIR})

run("cmake --install" ${CMAKE_COMMAND} --install ${KILN_BUILD_DIR} --config ${CONFIG} --prefix ${prefix})

# The package must be relocatable: every path in it relative to the prefix, none into the trees
# it came from (INTERFACE_INCLUDE_DIRECTORIES is where such a path would leak).
file(GLOB_RECURSE package_files ${prefix}/*.cmake)
if(NOT package_files)
  message(FATAL_ERROR "no CMake package under ${prefix}")
endif()
foreach(file IN LISTS package_files)
  file(STRINGS ${file} lines)
  foreach(line IN LISTS lines)
    foreach(tree ${KILN_SOURCE_DIR} ${KILN_BUILD_DIR})
      string(FIND "${line}" "${tree}" at)
      if(NOT at EQUAL -1)
        message(FATAL_ERROR "${file} names a path in ${tree}:\n${line}")
      endif()
    endforeach()
  endforeach()
endforeach()

# The per-configuration output directory keeps the program at ${bin} with any generator.
string(TOUPPER ${CONFIG} config_upper)
run("configuring apps/example" ${CMAKE_COMMAND} -S ${KILN_SOURCE_DIR}/apps/example -B ${build}
  -G ${GENERATOR} -DCMAKE_BUILD_TYPE=${CONFIG} -DCMAKE_PREFIX_PATH=${prefix}
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_NO_SYSTEM_FROM_IMPORTED=ON
  -DCMAKE_COMPILE_WARNING_AS_ERROR=ON -DCMAKE_RUNTIME_OUTPUT_DIRECTORY_${config_upper}=${bin}
  -DCMAKE_CXX_COMPILER=${CXX_COMPILER} "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
  "-DCMAKE_EXE_LINKER_FLAGS=${EXE_LINKER_FLAGS}")
# Found the installed package, not some other kiln on the machine.
file(STRINGS ${build}/CMakeCache.txt kiln_dir REGEX "^kiln_DIR:")
string(FIND "${kiln_dir}" "=${prefix}/" at)
if(at EQUAL -1)
  message(FATAL_ERROR "apps/example found kiln outside ${prefix}: ${kiln_dir}")
endif()

run("building apps/example" ${CMAKE_COMMAND} --build ${build} --config ${CONFIG})
run("running fit-sine" ${bin}/fit-sine ${WORK_DIR}/fit-sine.safetensors)
message("${out}")

# Only include/ is exported: the package must not put include/kiln itself on a consumer's path.
file(GLOB_RECURSE targets_file ${prefix}/*/kilnTargets.cmake)
file(READ ${targets_file} targets)
if(targets MATCHES "include/kiln[;\"]")
  message(FATAL_ERROR "the installed package exports include/kiln as an include folder")
endif()

set(shadow ${WORK_DIR}/shadow)
file(GLOB_RECURSE headers RELATIVE ${prefix}/include/kiln ${prefix}/include/kiln/*.h)
list(LENGTH headers count)
if(count LESS 20)
  message(FATAL_ERROR "only ${count} headers under ${prefix}/include/kiln")
endif()
foreach(header IN LISTS headers)
  file(WRITE ${shadow}/${header}
    "#error \"an installed kiln header reached the consumer's ${header}: kiln must include kiln/${header}\"\n")
endforeach()
run("configuring tests/install/consumer" ${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR}/consumer
  -B ${WORK_DIR}/consumer-build -G ${GENERATOR} -DCMAKE_BUILD_TYPE=${CONFIG} -DCMAKE_PREFIX_PATH=${prefix}
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_NO_SYSTEM_FROM_IMPORTED=ON -DKILN_SHADOW_DIR=${shadow}
  -DCMAKE_COMPILE_WARNING_AS_ERROR=ON -DCMAKE_RUNTIME_OUTPUT_DIRECTORY_${config_upper}=${bin}
  -DCMAKE_CXX_COMPILER=${CXX_COMPILER} "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
  "-DCMAKE_EXE_LINKER_FLAGS=${EXE_LINKER_FLAGS}")
run("building tests/install/consumer (${count} kiln headers shadowed)" ${CMAKE_COMMAND} --build
  ${WORK_DIR}/consumer-build --config ${CONFIG})
run("running consumer" ${bin}/consumer)
message("${out}")
