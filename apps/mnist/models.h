// The models mnist-train knows, written as a user of kiln's C++ API would write them.
#pragma once

#include <memory>
#include <string>

#include "kiln/layers/nn.h"

namespace kiln::apps {

// PyTorch's examples/mnist Net, with the same names and layouts, so a checkpoint loads there:
// conv 1->32 3x3, conv 32->64 3x3, max-pool 2, dropout 0.25, fc 9216->128, dropout 0.5, fc 128->10.
// forward returns logits (PyTorch's returns their log_softmax; cross_entropy folds that in).
struct Net : nn::Module {
  Net();
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::Dropout> dropout1, dropout2;
  std::shared_ptr<nn::Linear> fc1, fc2;
};

// 784 -> 128 -> 10 with ReLU.
struct MLP : nn::Module {
  MLP();
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Linear> fc1, fc2;
};

// A small CNN for speed runs: conv 1->16 5x5, pool, conv 16->32 5x5, pool, fc 512->10.
struct FastNet : nn::Module {
  FastNet();
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::Linear> fc;
};

// "cnn", "mlp" or "fast"; ValueError naming the choices otherwise.
std::shared_ptr<nn::Module> make_model(const std::string& name);

}  // namespace kiln::apps
