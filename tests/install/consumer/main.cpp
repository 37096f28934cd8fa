// Uses its own core/, layers/ and optim/ headers and kiln's side by side: a one-weight model of
// the consumer's wraps a kiln Linear layer trained by kiln's SGD to fit y = 2x. Exit status 1
// when the fit misses.
#include <cmath>
#include <cstdio>
#include <memory>

#include "core/tensor.h"
#include "layers/module.h"
#include "optim/optimizer.h"

#include <kiln/kiln.h>

struct Doubler : app::Module {
  std::shared_ptr<kiln::nn::Linear> fc = std::make_shared<kiln::nn::Linear>(1, 1, false);
  app::Tensor forward(const app::Tensor& x) override {
    kiln::NoGradGuard no_grad;
    kiln::Tensor y = fc->forward(kiln::from_vector(x.values, {static_cast<int64_t>(x.values.size()), 1}));
    return {y.to_vector<float>()};
  }
};

int main() {
  Doubler model;
  app::Optimizer settings;
  kiln::optim::SGD sgd(model.fc->parameters(), kiln::optim::SGDOptions(settings.learning_rate));
  const kiln::Tensor x = kiln::from_vector<float>({-1, 0.5f, 1}, {3, 1});
  for (int step = 0; step < 50; ++step) {
    sgd.zero_grad();
    kiln::Tensor loss = kiln::mse_loss(model.fc->forward(x), x * 2.0);
    loss.backward();
    sgd.step();
  }
  const float y = model.forward(app::Tensor{{3.0f}}).values.at(0);
  std::printf("consumer: the kiln layer inside the app's model gives 2 * 3 = %.4f\n", static_cast<double>(y));
  return std::fabs(y - 6.0f) < 1e-3f ? 0 : 1;
}
