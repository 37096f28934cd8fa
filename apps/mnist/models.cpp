#include "apps/mnist/models.h"

namespace kiln::apps {

Net::Net() : nn::Module("Net") {
  conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(1, 32, 3));
  conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(32, 64, 3));
  dropout1 = register_module("dropout1", std::make_shared<nn::Dropout>(0.25));
  dropout2 = register_module("dropout2", std::make_shared<nn::Dropout>(0.5));
  fc1 = register_module("fc1", std::make_shared<nn::Linear>(9216, 128));
  fc2 = register_module("fc2", std::make_shared<nn::Linear>(128, 10));
}

Tensor Net::forward(const Tensor& input) {
  // each layer's ReLU runs in the layer's own kernel (its epilogue)
  Tensor x = conv1->forward(input, Activation::relu);        // [N, 32, 26, 26]
  x = conv2->forward(x, Activation::relu);                   // [N, 64, 24, 24]
  // dropout1 in the pool's pass (the same values as dropout1->forward(max_pool2d(x, ...)))
  x = max_pool2d_dropout(x, {.kernel = {2, 2}}, dropout1->p, is_training());  // [N, 64, 12, 12]
  x = fc1->forward(x.flatten(1), Activation::relu);          // [N, 128]
  return fc2->forward(dropout2->forward(x));          // [N, 10]
}

MLP::MLP() : nn::Module("MLP") {
  fc1 = register_module("fc1", std::make_shared<nn::Linear>(784, 128));
  fc2 = register_module("fc2", std::make_shared<nn::Linear>(128, 10));
}

Tensor MLP::forward(const Tensor& x) { return fc2->forward(fc1->forward(x.flatten(1), Activation::relu)); }

FastNet::FastNet() : nn::Module("FastNet") {
  conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(1, 16, 5));
  conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(16, 32, 5));
  fc = register_module("fc", std::make_shared<nn::Linear>(512, 10));
}

Tensor FastNet::forward(const Tensor& input) {
  Tensor x = max_pool2d(conv1->forward(input, Activation::relu), {.kernel = {2, 2}});  // [N, 16, 12, 12]
  x = max_pool2d(conv2->forward(x, Activation::relu), {.kernel = {2, 2}});             // [N, 32, 4, 4]
  return fc->forward(x.flatten(1));
}

std::shared_ptr<nn::Module> make_model(const std::string& name) {
  if (name == "cnn") return std::make_shared<Net>();
  if (name == "mlp") return std::make_shared<MLP>();
  if (name == "fast") return std::make_shared<FastNet>();
  KILN_FAIL(ValueError, "unknown model '", name, "': choose cnn, mlp or fast");
}

}  // namespace kiln::apps
