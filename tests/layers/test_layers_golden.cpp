// kiln's nn modules against PyTorch's: the same weights (loaded with load_state_dict), the same
// inputs, then outputs, input and parameter gradients, running statistics and state_dict keys
// compared with tests/data/layers_golden.txt (written by tests/golden/make_layers_golden.py,
// which lists the roles). Each case runs in f64 (the model moved with to(f64) before loading)
// and in f32 (the f64 values converted by load_state_dict).
#include <doctest/doctest.h>

#include <exception>
#include <set>
#include <string>
#include <vector>

#include "golden_file.h"
#include "kiln/layers/nn.h"

using namespace kiln;
using golden::GoldenFile;
using golden::Tolerance;

namespace {

const GoldenFile& fixtures() {
  static const GoldenFile file(KILN_TEST_DATA_DIR "/layers_golden.txt");
  return file;
}

// The entries "<prefix><key>" in file order, as a state dict of `key`s.
nn::StateDict state_from(const std::string& prefix, DType dtype) {
  nn::StateDict state;
  for (const auto& [name, f] : fixtures().entries())
    if (name.starts_with(prefix)) state.emplace_back(name.substr(prefix.size()), f.tensor(dtype));
  return state;
}

std::vector<std::string> keys(const nn::StateDict& state) {
  std::vector<std::string> out;
  for (const auto& [key, t] : state) out.push_back(key);
  return out;
}

struct Run {
  std::string name;  // the case in the file
  DType dtype;
  Tolerance tol;

  std::string tag(const std::string& what) const { return name + " (" + std::string(dtype_name(dtype)) + ") " + what; }
  const golden::Fixture& at(const std::string& role) const { return fixtures().at(name + "." + role); }
  Tensor tensor(const std::string& role) const { return at(role).tensor(dtype); }
  void compare(const std::string& role, const Tensor& got) const { golden::compare(tag(role), got, at(role), tol); }

  // Loads the case's weights; the module must list PyTorch's keys in PyTorch's order.
  void load(nn::Module& m) const {
    nn::StateDict state = state_from(name + ".state.", dtype);
    CHECK_MESSAGE(keys(m.state_dict()) == keys(state), tag("state_dict keys differ from PyTorch's"));
    m.to(dtype);
    m.load_state_dict(state);
  }
  // Forward and backward of <step>.input against <step>.output, <step>.gout, <step>.grad_input.
  void step(nn::Module& m, const std::string& role) const {
    Tensor x = tensor(role + ".input").requires_grad_();
    Tensor y = m(x);
    compare(role + ".output", y);
    y.backward(tensor(role + ".gout"));
    compare(role + ".grad_input", x.grad());
  }
  void grads(const nn::Module& m, const std::string& role) const {
    for (const auto& [key, p] : m.named_parameters()) compare(role + "." + key, p.grad());
  }
  void state(const nn::Module& m, const std::string& role) const {
    for (const auto& [key, t] : m.state_dict()) compare(role + "." + key, t);
  }
};

void linear_case(const Run& r) {
  nn::Linear m(5, 3);
  r.load(m);
  r.step(m, "step");  // input [2, 4, 5]: a batch of batches
  r.grads(m, "grad");
}

void conv2d_case(const Run& r) {
  nn::Conv2d m(nn::Conv2dOptions(4, 6, 3).stride(2).padding(1).groups(2));
  r.load(m);
  r.step(m, "step");
  r.grads(m, "grad");
}

void batchnorm2d_case(const Run& r) {
  nn::BatchNorm2d m(3);
  r.load(m);
  r.step(m, "train1");
  r.step(m, "train2");
  r.grads(m, "grad");  // accumulated over both steps
  r.state(m, "state_after");
  m.eval();
  m.zero_grad();
  r.step(m, "eval");
  r.grads(m, "eval_grad");
  r.state(m, "state_after");  // evaluation leaves the running statistics alone
}

void cnn_case(const Run& r) {
  nn::Sequential m(nn::Conv2d(nn::Conv2dOptions(2, 4, 3).padding(1)), nn::BatchNorm2d(4), nn::ReLU(),
                   nn::MaxPool2d(2), nn::Conv2d(4, 6, 3), nn::GELU(), nn::Flatten(), nn::Linear(24, 5));
  nn::CrossEntropyLoss criterion(nn::CrossEntropyLossOptions().label_smoothing(0.1));
  r.load(m);
  Tensor x = r.tensor("input").requires_grad_();
  Tensor logits = m(x);
  Tensor loss = criterion(logits, r.tensor("target"));
  r.compare("logits", logits);
  r.compare("loss", loss);
  loss.backward();
  r.compare("grad_input", x.grad());
  r.grads(m, "grad");
  r.state(m, "state_after");
}

void run_all(DType dtype, const Tolerance& tol) {
  const std::vector<std::pair<std::string, void (*)(const Run&)>> cases = {
      {"linear", linear_case}, {"conv2d", conv2d_case}, {"batchnorm2d", batchnorm2d_case}, {"cnn", cnn_case}};
  std::set<std::string> in_file, run;
  for (const auto& [name, f] : fixtures().entries()) in_file.insert(name.substr(0, name.find('.')));
  for (const auto& [name, fn] : cases) {
    run.insert(name);
    try {
      fn(Run{name, dtype, tol});
    } catch (const std::exception& e) {
      FAIL_CHECK(name << " (" << dtype << ") threw: " << e.what());
    }
  }
  CHECK(in_file == run);  // every case in the file has a test here
}

}  // namespace

TEST_CASE("layers golden: f64 matches PyTorch to ~1e-10") { run_all(DType::f64, {1e-10, 1e-12}); }

// f32 weights and inputs are the f64 values rounded: ~1e-7 relative error per value and operation.
TEST_CASE("layers golden: f32 matches PyTorch to ~1e-4") { run_all(DType::f32, {1e-4, 1e-5}); }
