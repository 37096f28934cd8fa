// ModuleList and ModuleDict (PyTorch's names and order, lookups and their errors), and a module's
// hooks: forward pre- and post-hooks that see and replace the input and output, full backward
// hooks that see both gradients and replace the input's, removal, and Sequential calling its
// modules through them (a Linear and ReLU with hooks are not fused past them).
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "kiln/kiln.h"

using namespace kiln;

namespace {

// Whether a and b agree within tol everywhere.
bool close(const Tensor& a, const Tensor& b, double tol = 1e-12) { return abs(a - b).max().item() <= tol; }

// Blocks in a ModuleList, heads in a ModuleDict: the names a PyTorch model of this shape has.
struct Net : nn::Module {
  Net() {
    blocks = register_module("blocks", std::make_shared<nn::ModuleList>(nn::Linear(4, 4), nn::Linear(4, 4)));
    heads = register_module("heads", std::make_shared<nn::ModuleDict>(std::initializer_list<
                                                                       std::pair<std::string, std::shared_ptr<nn::Module>>>{
                                         {"digits", std::make_shared<nn::Linear>(4, 10)},
                                         {"parity", std::make_shared<nn::Linear>(4, 2, false)}}));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (const auto& block : *blocks) h = relu((*block)(h));
    return (*(*heads)["digits"])(h);
  }
  std::shared_ptr<nn::ModuleList> blocks;
  std::shared_ptr<nn::ModuleDict> heads;
};

}  // namespace

TEST_CASE("ModuleList and ModuleDict: PyTorch's names and order, typed lookups, and lookups that fail") {
  Net net;
  std::vector<std::string> names;
  for (const auto& [name, t] : net.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"blocks.0.weight", "blocks.0.bias", "blocks.1.weight", "blocks.1.bias",
                                          "heads.digits.weight", "heads.digits.bias", "heads.parity.weight"});
  CHECK(net.blocks->size() == 2);
  CHECK(net.blocks->at<nn::Linear>(1)->weight.shape() == Shape{4, 4});
  CHECK_THROWS_WITH_AS(net.blocks->at<nn::Conv2d>(0), doctest::Contains("ModuleList[0] is a Linear"), ValueError);
  CHECK_THROWS_WITH_AS((*net.blocks)[2], doctest::Contains("ModuleList[2]: it holds 2 modules"), ValueError);
  int seen = 0;
  for (const auto& block : *net.blocks) seen += block->name() == "Linear";
  CHECK(seen == 2);

  CHECK(net.heads->keys() == std::vector<std::string>{"digits", "parity"});
  CHECK(net.heads->contains("parity"));
  CHECK_FALSE(net.heads->contains("colour"));
  CHECK(net.heads->at<nn::Linear>("parity")->weight.shape() == Shape{2, 4});
  CHECK_THROWS_WITH_AS((*net.heads)["colour"],
                       doctest::Contains("no module under 'colour' (it holds 'digits', 'parity')"), ValueError);
  CHECK_THROWS_AS(net.heads->insert("digits", std::make_shared<nn::ReLU>()), ValueError);  // names are unique
  CHECK(net(uniform({3, 4}, -1, 1)).shape() == Shape{3, 10});
  CHECK_THROWS_AS((*net.blocks)(uniform({3, 4}, -1, 1)), Error);  // no forward of its own
}

TEST_CASE("forward hooks see the input and output and may replace them; removing one stops it") {
  manual_seed(6);
  nn::Linear fc(3, 2);
  const Tensor x = uniform({5, 3}, -1, 1);
  std::vector<std::string> calls;
  auto pre = fc.register_forward_pre_hook([&](nn::Module& m, const Tensor& in) -> std::optional<Tensor> {
    calls.push_back("pre " + m.name());
    return in * 2.0;  // the layer sees 2x
  });
  auto post = fc.register_forward_hook([&](nn::Module&, const Tensor& in, const Tensor& out) -> std::optional<Tensor> {
    calls.push_back("post");
    CHECK(close(in, x * 2.0));
    return out + 1.0;
  });
  CHECK(fc.has_hooks());
  const Tensor y = fc(x);
  CHECK(calls == std::vector<std::string>{"pre Linear", "post"});
  CHECK(close(y, fc.forward(x * 2.0) + 1.0, 1e-6));
  CHECK(close(fc.forward(x), nn::linear(x, fc.weight, fc.bias), 0));  // forward() itself runs no hook
  CHECK(calls.size() == 2);

  pre.remove();
  post.remove();
  post.remove();  // twice: nothing
  CHECK_FALSE(fc.has_hooks());
  CHECK(close(fc(x), fc.forward(x), 0));
  CHECK(calls.size() == 2);
}

TEST_CASE("full backward hooks see the input's and the output's gradients and may replace the input's") {
  manual_seed(7);
  nn::Linear fc(3, 2);
  const Tensor x = uniform({4, 3}, -1, 1, DType::f32).requires_grad_();
  Tensor seen_in, seen_out;
  fc.register_full_backward_hook([&](nn::Module&, const Tensor& grad_in, const Tensor& grad_out) -> std::optional<Tensor> {
    seen_in = grad_in, seen_out = grad_out;
    if (!grad_in.defined()) return std::nullopt;
    return grad_in * 10.0;
  });
  const Tensor r = uniform({4, 2}, -1, 1);
  (fc(x) * r).sum().backward();
  REQUIRE(seen_out.defined());
  CHECK(close(seen_out, r, 0));                   // d(sum(y * r))/dy
  CHECK(close(seen_in, matmul(r, fc.weight), 1e-6));  // and the input's, y = x W^T + b
  CHECK(close(x.grad(), seen_in * 10.0, 1e-6));   // replaced
  CHECK(fc.weight.grad().defined());              // the parameters' gradients are untouched

  // an input that needs no gradient: the hook runs with none for it
  fc.zero_grad();
  seen_in = seen_out = Tensor();
  (fc(uniform({4, 3}, -1, 1)) * r).sum().backward();
  CHECK(seen_out.defined());
  CHECK_FALSE(seen_in.defined());
}

TEST_CASE("Sequential calls its modules through their hooks, and does not fuse a Linear and ReLU past them") {
  manual_seed(8);
  nn::Sequential net(nn::Linear(3, 4), nn::ReLU(), nn::Linear(4, 2));
  const Tensor x = uniform({2, 3}, -1, 1);
  Tensor before_relu;
  net[0]->register_forward_hook([&](nn::Module&, const Tensor&, const Tensor& out) -> std::optional<Tensor> {
    before_relu = out;  // the Linear's own output, which the fused kernel never shows
    return std::nullopt;
  });
  const Tensor y = net(x);
  REQUIRE(before_relu.defined());
  const auto fc = std::static_pointer_cast<nn::Linear>(net[0]);
  CHECK(close(before_relu, nn::linear(x, fc->weight, fc->bias), 1e-6));
  CHECK(before_relu.min().item() < 0);  // some of it negative: not the ReLU's output
  CHECK(close(y, net.forward(x), 0));
}
