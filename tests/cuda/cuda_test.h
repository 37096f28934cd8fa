// What every CUDA test file shares: whether a GPU is here (a case without one reports that it
// skipped and passes), and, from tests/backend_cases.h, random shapes that are not multiples of
// anything, broadcastable partners and an elementwise comparison against the CPU.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kiln/core/backend.h"
#include "kiln/kiln.h"
#include "tests/backend_cases.h"

namespace kiln::test {

inline bool have_cuda() {
  try {
    (void)backend_for(Device::cuda(0));
    return true;
  } catch (const BackendUnavailable& e) {
    MESSAGE("skipped: " << std::string(e.what()));
    return false;
  }
}

inline const Device kCuda = Device::cuda(0);

inline void check_close(const Tensor& gpu, const Tensor& cpu, double rtol, double atol, const std::string& what) {
  check_close_on(kCuda, gpu, cpu, rtol, atol, what);
}

}  // namespace kiln::test
