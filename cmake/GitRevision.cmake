# Run at every build (cmake -P, from apps/CMakeLists.txt): writes OUTPUT, a header defining
# KILN_GIT_REVISION as `git describe --always --dirty` of SOURCE_DIR ("" outside a git checkout,
# as in a source tarball), rewritten only when it changes, so that nothing recompiles otherwise.
execute_process(COMMAND git -C "${SOURCE_DIR}" describe --always --dirty --abbrev=12
                OUTPUT_VARIABLE revision OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE failed)
if(failed)
  set(revision "")
endif()
set(text "// Made by cmake/GitRevision.cmake at build time.\n#define KILN_GIT_REVISION \"${revision}\"\n")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
endif()
if(NOT "${old}" STREQUAL "${text}")
  file(WRITE "${OUTPUT}" "${text}")
endif()
