// What every test_cuda file shares: the device (tests/device_main.cpp runs test_cuda only where
// a CUDA device is here, else CTest reports it skipped), and, from tests/backend_cases.h, random
// shapes that are not multiples of anything and an elementwise comparison against the CPU.
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "kiln/kiln.h"
#include "tests/backend_cases.h"

namespace kiln::test {

inline const Device kCuda = Device::cuda(0);

inline void check_close(const Tensor& gpu, const Tensor& cpu, double rtol, double atol, const std::string& what) {
  check_close_on(kCuda, gpu, cpu, rtol, atol, what);
}

}  // namespace kiln::test
