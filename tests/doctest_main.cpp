// The main of every test binary but the device ones (tests/device_main.cpp): doctest's, with the
// exit code of tests/skip.h (77, CTest's "skipped", where a case could not run here).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "tests/skip.h"

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  return kiln::test::exit_code(context.run());
}
