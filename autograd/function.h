// Custom ops: an op whose forward and backward the program writes itself, as libtorch's
// torch::autograd::Function. Derive from Function<YourOp> and give it two static functions:
//
//   struct ScaledSquare : kiln::autograd::Function<ScaledSquare> {
//     static constexpr const char* name = "scaled_square";  // optional: how errors name it
//     // Any arguments: the Tensors among them are the op's inputs, in order; the rest is passed
//     // through. Runs with grad mode off: the ops inside record nothing.
//     static Tensor forward(kiln::autograd::Context& ctx, const Tensor& x, double scale) {
//       ctx.save_for_backward({x});
//       ctx.data["scale"] = scale;
//       return x * x * scale;
//     }
//     // The gradient of the output in, one gradient per input Tensor out (an undefined Tensor
//     // where ctx.needs_input_grad(i) is false is fine).
//     static kiln::autograd::Grads backward(kiln::autograd::Context& ctx, const Tensor& grad) {
//       const Tensor& x = ctx.saved()[0];
//       return {grad * x * (2 * std::any_cast<double>(ctx.data.at("scale")))};
//     }
//   };
//   Tensor y = ScaledSquare::apply(x, 0.5);
//
// apply runs forward, and where grad mode is on and an input requires grad, records a node whose
// formula is backward, as kiln's own ops do: the engine checks the count, shapes and definedness
// of what backward returns, anomaly mode checks its values, and a tensor saved with
// save_for_backward that is written in place before backward runs is an error naming it. Check a
// backward against finite differences with gradcheck (autograd/gradcheck.h):
//
//   auto f = [](const std::vector<Tensor>& in) { return ScaledSquare::apply(in[0], 0.5); };
//   GradcheckResult r = gradcheck(f, {uniform({3, 4}, -1, 1, kF64).requires_grad_()});
//
// One output; forward must not write its inputs in place; backward runs with grad mode off (no
// gradients of gradients), as every formula in kiln does.
#pragma once

#include <any>
#include <cstddef>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/autograd/node.h"
#include "kiln/core/error.h"

namespace kiln::autograd {

template <class Derived>
struct Function;

// What a custom op's forward leaves for its backward.
class Context {
 public:
  // The tensors backward reads, saved detached with their versions (as kiln's own ops save
  // theirs): one written in place before backward runs is an error that names it.
  void save_for_backward(std::initializer_list<Tensor> tensors) {
    for (const Tensor& t : tensors) saved_.push_back(saves_(t));
  }
  // In backward: the tensors saved, in order.
  const std::vector<Tensor>& saved() const { return saved_; }
  // Anything else backward needs (sizes, flags, constants).
  std::map<std::string, std::any> data;
  // In backward: whether input i (counting the Tensor arguments only) wants a gradient, so that
  // backward can skip one that nobody uses.
  bool needs_input_grad(size_t i) const { return i < needed_.size() && needed_[i]; }

 private:
  template <class>
  friend struct Function;
  Saves saves_;
  std::vector<Tensor> saved_;
  std::vector<bool> needed_;
};

template <class Derived>
struct Function {
  template <class... Args>
  static Tensor apply(Args&&... args) {
    std::vector<Tensor> inputs;
    (add_input(inputs, args), ...);
    auto ctx = std::make_shared<Context>();
    Tensor output;
    {
      NoGradGuard no_grad;
      output = Derived::forward(*ctx, std::forward<Args>(args)...);
    }
    KILN_CHECK(output.defined(), AutogradError, "custom function '", op_name(), "': forward returned no tensor");
    output = output.detach();  // a tensor of its own, even where forward returned an input as it is
    if (!is_recording(inputs)) return output;
    auto backward = [ctx](const Tensor& grad, Needed& need) -> Grads {
      ctx->needed_.assign(need.size(), false);
      for (size_t i = 0; i < need.size(); ++i) ctx->needed_[i] = need[i];
      return Derived::backward(*ctx, grad);
    };
    record(output, op_name(), inputs, std::move(backward), ctx->saves_);
    return output;
  }

 private:
  static std::string_view op_name() {
    if constexpr (requires { std::string_view(Derived::name); }) return Derived::name;
    else return "custom function";
  }
  template <class T>
  static void add_input(std::vector<Tensor>& inputs, const T& arg) {
    if constexpr (std::is_same_v<std::remove_cvref_t<T>, Tensor>) inputs.push_back(arg);
  }
};

}  // namespace kiln::autograd
