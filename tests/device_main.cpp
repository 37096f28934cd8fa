// The main of the device test binaries (test_backend_ops, test_cuda, test_vulkan), in place of
// doctest's: it runs the cases of the backends this binary tests that have a device here, and
// exits with kSkipped (77, the tests' SKIP_RETURN_CODE in CTest) where none has, so that a machine
// without a GPU reports the tests skipped, not passed. Under CI=true a backend that must be there
// (Vulkan: CI installs lavapipe) fails instead. A case that cannot run on the device here (a
// feature it lacks) skips itself, which gives the same exit code (tests/skip.h).
//
//   --backend=NAME   only NAME's cases ("cuda", "vulkan"): in test_backend_ops the other
//                    backends' suites are left out; every doctest option works as usual
//
// The backends a binary tests: KILN_TEST_BACKEND where it is defined (test_cuda: "cuda"), else
// every one compiled in (test_backend_ops, whose cases are in one doctest suite per backend).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "tests/device_backends.h"
#include "tests/skip.h"

namespace {

// Whether `arg` only asks doctest something (a list, its help or version, a count), which needs
// no device.
bool query_only(std::string_view arg) {
  arg.remove_prefix(std::min(arg.find_first_not_of('-'), arg.size()));
  if (arg.starts_with("dt-")) arg.remove_prefix(3);
  arg = arg.substr(0, arg.find('='));
  for (std::string_view q : {"ltc", "lts", "lr", "h", "?", "help", "v", "version", "c", "count"})
    if (arg == q) return true;
  return arg.starts_with("list-");
}

}  // namespace

int main(int argc, char** argv) {
  using kiln::test::DeviceBackend;
#ifdef KILN_TEST_BACKEND
  const std::string_view only = KILN_TEST_BACKEND;
#else
  const std::string_view only;
#endif
  std::string wanted;
  std::vector<const char*> args;
  bool query = false;
  for (int i = 0; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (i > 0 && arg.starts_with("--backend=")) {
      wanted = arg.substr(10);
      continue;
    }
    query = query || (i > 0 && query_only(arg));
    args.push_back(argv[i]);
  }
  if (!wanted.empty() && (only.empty() ? wanted != "cuda" && wanted != "vulkan" : wanted != only)) {
    std::cerr << "--backend=" << wanted << ": this binary tests " << (only.empty() ? "cuda and vulkan" : only) << "\n";
    return 2;
  }
  if (wanted.empty()) wanted = only;
  doctest::Context context(static_cast<int>(args.size()), args.data());

  int ready = 0, known = 0;
  const bool ci = kiln::test::in_ci();
  for (const DeviceBackend& b : kiln::test::compiled_backends()) {
    const bool asked = wanted.empty() || b.name == wanted;
    known += asked;
    std::string missing = asked && !query ? b.missing() : std::string();
    if (asked && missing.empty()) {
      ++ready;
      continue;
    }
    context.addFilter("test-suite-exclude", std::string(b.name).c_str());
    if (!asked) continue;
    if (ci && b.required_in_ci) {
      std::cerr << "no " << b.name << " device in CI: " << missing << "\n";
      return 1;
    }
    std::cout << "skipped " << b.name << ": " << missing << "\n";
  }
  if (known == 0) {
    std::cout << "skipped: this build of kiln has no " << (wanted.empty() ? "device" : wanted) << " backend\n";
    return query ? context.run() : kiln::test::kSkipped;
  }
  if (ready == 0 && !query) return kiln::test::kSkipped;
  return kiln::test::exit_code(context.run());  // 77 too where a case was skipped (tests/skip.h)
}
