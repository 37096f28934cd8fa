// The layers that are kiln's ops put together (LayerNorm, GroupNorm, Embedding,
// AdaptiveAvgPool2d, Unflatten, Identity), on a device backend against the CPU: the same module
// (the same seed) on each, the same input and output gradient, and the output, the input's
// gradient and every parameter's gradient compared. test_backend_ops runs them per backend.
#pragma once

#include <doctest/doctest.h>

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "tests/backend_ops.h"

namespace kiln::test {

inline void layer_cases(const Run& r) {
  struct Case {
    std::string name;
    std::function<std::shared_ptr<nn::Module>()> make;
    Shape x;
    bool indices = false;  // x is i32 indices in [0, 11)
  };
  const std::vector<Case> cases = {
      {"LayerNorm({37})", [] { return std::make_shared<nn::LayerNorm>(nn::LayerNormOptions({37})); }, {13, 37}},
      {"LayerNorm({5, 7}) without affine",
       [] { return std::make_shared<nn::LayerNorm>(nn::LayerNormOptions({5, 7}).elementwise_affine(false)); },
       {3, 2, 5, 7}},
      {"GroupNorm(3, 6)", [] { return std::make_shared<nn::GroupNorm>(3, 6); }, {4, 6, 9, 7}},
      {"GroupNorm(1, 5) on [N, C]", [] { return std::make_shared<nn::GroupNorm>(1, 5); }, {31, 5}},
      {"Embedding(11, 6)", [] { return std::make_shared<nn::Embedding>(11, 6); }, {7, 13}, true},
      {"AdaptiveAvgPool2d({3, 2}) of 7 x 5", [] { return std::make_shared<nn::AdaptiveAvgPool2d>(std::array<int64_t, 2>{3, 2}); },
       {2, 3, 7, 5}},
      {"AdaptiveAvgPool2d(1)", [] { return std::make_shared<nn::AdaptiveAvgPool2d>(1); }, {2, 3, 13, 13}},
      {"Unflatten(1, {4, -1})", [] { return std::make_shared<nn::Unflatten>(1, std::vector<int64_t>{4, -1}); }, {3, 20}},
      {"Identity", [] { return std::make_shared<nn::Identity>(); }, {5, 3}},
  };
  for (const Take& k : r.takes)
    for (const Case& c : cases) {
      const DType t = k.dtype;
      const std::string what = c.name + " " + std::string(dtype_name(t));
      // a mean far from 0 against the spread, as for batch norm
      const Tensor x = c.indices ? uniform(c.x, 0, 11).to(DType::i32) : uniform(c.x, 2.0, 4.0, t);
      Tensor out[2], gx[2];
      std::vector<Tensor> gp[2];
      for (int d = 0; d < 2; ++d) {
        const Device on = d ? r.device : Device::cpu();
        manual_seed(11);
        std::shared_ptr<nn::Module> m = c.make();
        m->to(t);
        m->to(on);
        Tensor xd = c.indices ? x.to(on) : x.detach().to(on).requires_grad_();
        out[d] = (*m)(xd);
        manual_seed(12);
        out[d].backward(uniform(out[d].shape(), -1, 1, t).to(on));
        if (!c.indices) gx[d] = xd.grad();
        for (const Tensor& p : m->parameters()) gp[d].push_back(p.grad());
      }
      r.check(out[1], out[0], k.tol, what);
      if (!c.indices) r.check(gx[1], gx[0], k.tol, "grad x " + what);
      REQUIRE(gp[0].size() == gp[1].size());
      for (size_t i = 0; i < gp[0].size(); ++i)
        // a parameter's gradient sums over the batch and positions (up to 9 x 7 x 4 terms here)
        r.check(gp[1][i], gp[0][i], k.tol.atol_times(8), "grad parameter " + std::to_string(i) + " " + what);
    }
}

}  // namespace kiln::test
