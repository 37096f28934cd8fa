// What the tests of mnist-train and mnist-predict share: where the MNIST files are (KILN_DATA, or
// the folder scripts/setup fills) and a temporary folder per test.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/temp_dir.h"

namespace kiln::test {

inline std::string mnist_dir() {
  const char* env = std::getenv("KILN_DATA");
  return env ? env : KILN_MNIST_DIR;
}
// Whether `file` (an IDX file's name) is in mnist_dir(): the cases that train or evaluate on the
// real data skip without it.
inline bool have_mnist(const char* file) { return std::filesystem::exists(std::filesystem::path(mnist_dir()) / file); }

}  // namespace kiln::test
