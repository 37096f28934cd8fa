// What the tests of mnist-train and mnist-predict share: where the MNIST files are (KILN_DATA, or
// the folder scripts/setup fills), what a case does without them, and a temporary folder per test.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/skip.h"
#include "tests/temp_dir.h"

namespace kiln::test {

inline std::string mnist_dir() {
  const char* env = std::getenv("KILN_DATA");
  return env ? env : KILN_MNIST_DIR;
}
// Whether `file` (an IDX file's name) is in mnist_dir(): the cases that train or evaluate on the
// real data skip without it.
inline bool have_mnist(const char* file) { return std::filesystem::exists(std::filesystem::path(mnist_dir()) / file); }

// Marks the running case skipped for want of the MNIST files, or failed under CI=true, where
// scripts/setup fetched them: `if (!have_data()) return skip_without_mnist();`. Such cases are in
// the doctest suite "needs-mnist" (or "needs-mnist-WHAT"), which CTest runs as a test of its own.
inline void skip_without_mnist() {
  skip("no MNIST in " + mnist_dir() + " (run scripts/setup, or set KILN_DATA=DIR)", InCi::fail);
}

}  // namespace kiln::test
