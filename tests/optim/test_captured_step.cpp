// The parts of captured steps (core/capture.h, optim/captured_step.h) that a machine without a GPU
// can check: devices that do not capture say so, bad arguments are refused, and draws outside a
// capture are keyed as before. tests/cuda/test_cuda_graph.cpp runs captured steps on a GPU.
#include <doctest/doctest.h>

#include <vector>

#include "kiln/core/backend.h"
#include "kiln/kiln.h"

using namespace kiln;

TEST_CASE("the CPU backend refuses to capture, by name") {
  bool ran = false;
  CHECK_THROWS_WITH_AS(capture(Device::cpu(), [&] { ran = true; }),
                       doctest::Contains("the cpu backend cannot capture a graph"), BackendUnavailable);
  CHECK_FALSE(ran);
  CHECK(capturing(Device::cpu()) == nullptr);
}

TEST_CASE("CapturedStep: arguments and devices it refuses") {
  Tensor w = ones({3}).requires_grad_();
  optim::SGD opt({w}, optim::SGDOptions(0.1));
  int calls = 0;
  auto step = [&](const std::vector<Tensor>& in) {
    ++calls;
    opt.zero_grad();
    (w * in[0]).sum().backward();
    opt.step();
    return std::vector<Tensor>{};
  };
  CHECK_THROWS_AS(optim::CapturedStep(opt, step, 0), ValueError);
  CHECK_THROWS_AS(optim::CapturedStep(opt, {}), ValueError);
  optim::CapturedStep captured(opt, step);
  CHECK_THROWS_AS(captured({}), ValueError);
  CHECK_THROWS_WITH_AS(captured({ones({3})}), doctest::Contains("does not capture graphs"), BackendUnavailable);
  CHECK(calls == 0);  // refused before anything ran
  CHECK(captured.graphs() == 0);
  CHECK_THROWS_WITH_AS(captured.keep(-1), doctest::Contains("steps must be in [0, 2^31), got -1"), ValueError);
  CHECK_THROWS_WITH_AS(captured.recent(0, 1), doctest::Contains("keep() was not called"), ValueError);
  CHECK(captured.keep(3).calls() == 0);
}

TEST_CASE("outside a capture a draw's key is where the generator stood") {
  Generator g(9);
  g.advance(10);
  const philox::Key key = g.reserve(100, backend_for(Device::cpu()));
  CHECK(key.seed == 9);
  CHECK(key.offset == 3);  // 10 elements took 3 blocks
  CHECK(key.replay == nullptr);
  CHECK(g.offset() == 3 + 25);
}
