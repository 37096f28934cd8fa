// Cases that cannot run here say so: a case whose input is missing (the MNIST files, PyTorch, a
// device feature) reports it skipped, with the reason, instead of passing having checked nothing.
//
//   if (!have_data()) return kiln::test::skip("no MNIST in " + dir + " (run scripts/setup)", InCi::fail);
//
// doctest 2.4 has no skip at run time, so the mains (tests/doctest_main.cpp, tests/device_main.cpp)
// turn one into the binary's exit code: 77, which CTest reports as skipped (SKIP_RETURN_CODE), when
// no case failed and at least one was skipped. A binary whose other cases can run anywhere keeps
// the cases with a need in a doctest suite "needs-WHAT"; its CTest test runs the others, and
// kiln_add_needs_test (cmake/KilnHelpers.cmake) runs the suite as a test of its own, so CTest's
// summary says which part ran and which was skipped.
#pragma once

#include <string>

namespace kiln::test {

// The exit code of a test binary that skipped a case, or whose backend has no device here: CTest
// reports the test skipped.
inline constexpr int kSkipped = 77;

// Whether CI=true: CI provides what scripts/setup installs, so some missing inputs fail there.
bool in_ci();

// What a missing input means under CI=true: a skip still (PyTorch, which CI does not install; a
// device feature), or a failure (the MNIST files, which scripts/setup fetches).
enum class InCi { skip, fail };

// Marks the running case skipped for `reason` (or fails it, under CI=true with InCi::fail). The
// case then returns: `return skip(...)`.
void skip(const std::string& reason, InCi ci = InCi::skip);

// The exit code of a test binary from doctest's result: doctest's where a case failed or nothing
// ran (a query such as --list-test-cases); 1 where no case passed the filters (a CTest test that
// would check nothing); kSkipped where a case was skipped, after a list of them; else 0.
int exit_code(int doctest_result);

}  // namespace kiln::test
