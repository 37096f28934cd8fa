// Optimizer: the base of SGD, Adam, AdamW, Adadelta and RMSprop, with PyTorch's semantics.
//
// An optimizer holds the parameters it updates (handles to the model's leaves, in the order
// given), one learning rate, the other hyperparameters of its rule, and per parameter a step
// count and its state tensors (momentum buffers, running averages) on the parameter's device
// and in its dtype. step() updates every parameter that has a gradient in one fused backend
// call per (device, dtype) — core/backend.h gives the update rules — under NoGradGuard and
// without reading anything back to the host. zero_grad() drops the gradients (PyTorch's
// set_to_none=True).
//
// Checkpoints: state_dict() flattens PyTorch's optimizer.state_dict() into named tensors,
//   "state.<i>.step"            f64 scalar: updates parameter i has had (Adam, Adadelta, RMSprop)
//   "state.<i>.<buffer>"        the state tensors under PyTorch's names ("exp_avg", ...)
//   "param_groups.0.<hyper>"    f64: lr, momentum, ..., "betas" as [2], flags as 0 or 1
// where i is the parameter's position in the list the optimizer was built from. A parameter
// that never had a gradient has no state, as in PyTorch. load_state_dict() checks the keys, the
// shapes and the values before it changes anything.
//
// One parameter group: kiln has no per-group hyperparameters (yet); "param_groups.0" keeps
// room for them.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/autograd/ops.h"

namespace kiln::optim {

// Named tensors in a fixed order (the same type as nn::StateDict).
using StateDict = NamedTensors;  // kiln::NamedTensors (core/tensor.h)

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates every parameter whose grad() is defined; the others (and their state) stay as they
  // are, as in PyTorch. Each update is an in-place write: it bumps the parameter's version, so a
  // graph recorded before the step, which saved the old values, refuses its backward.
  void step();
  // Drops every parameter's gradient, so the next backward starts from nothing.
  void zero_grad();

  double lr() const { return lr_; }
  void set_lr(double lr);  // what schedulers call
  // The momentum that OneCycleLR cycles: SGD's and RMSprop's momentum, Adam's beta1; nullopt
  // for an optimizer that has none (Adadelta), whose set_momentum throws.
  virtual std::optional<double> momentum() const { return std::nullopt; }
  virtual void set_momentum(double momentum);

  int64_t step_count() const { return step_count_; }  // step() calls on this object
  const std::vector<Tensor>& parameters() const { return params_; }
  std::string_view name() const { return name_; }  // "SGD", "Adam", ...

  // The state and hyperparameters as named tensors (keys above). The state tensors are the
  // optimizer's own, not copies (as PyTorch's): clone them to keep a snapshot while training.
  StateDict state_dict() const;
  // Replaces hyperparameters and state with `dict`'s, copied to each parameter's device and
  // dtype. Throws ValueError naming the key and the rule on a missing, unexpected or duplicate
  // key or an invalid value, ShapeError on a wrong shape; the optimizer is unchanged then.
  void load_state_dict(const StateDict& dict);

 protected:
  // A hyperparameter that state_dict() saves under "param_groups.0.<name>", as the field of the
  // subclass's options that holds it: a number, a pair (betas, saved as [2]) or a flag (saved as
  // 0 or 1).
  struct Hyper {
    std::string name;
    std::variant<double*, std::pair<double, double>*, bool*> field;
  };
  // Whether a state buffer must be there for a parameter that has state, may be, or must not.
  enum class Presence : uint8_t { required, optional, absent };

  // `buffers`: the names of the per-parameter state tensors, in the order the subclass indexes
  // them; `counts_steps`: whether each parameter keeps a step count (all but SGD).
  Optimizer(std::string_view name, std::vector<Tensor> params, double lr,
            std::vector<std::string> buffers, bool counts_steps);

  // Called once by the subclass's constructor: every hyperparameter but lr, in PyTorch's order,
  // as fields of the subclass's options, and `check`, which throws ValueError (as PyTorch's
  // constructor does) when their values break a rule. Runs `check` on the values they hold.
  void declare_hypers(std::vector<Hyper> hypers, std::function<void()> check);
  // Runs `change` on the hyperparameters' fields, then `check`; when it throws, every field is
  // as it was before. How set_momentum and load_state_dict change them.
  void change_hypers(const std::function<void()>& change);

  // Updates the parameters listed in `active` (positions of those that have a gradient).
  virtual void update(const std::vector<size_t>& active) = 0;
  // Which buffers a parameter with state has under the current hyperparameters.
  virtual Presence presence(size_t buffer) const = 0;

  // ---- for subclasses ----
  // Updates parameter `param` has had, this step's included (step() counts it before update()).
  int64_t param_step(size_t param) const { return state_[param].step; }
  // Whether the step is being captured as a graph (core/capture.h): update() then sets each
  // call's `next`, and its state buffers must exist already (check_not_capturing throws
  // CaptureError naming the parameter and the buffer).
  bool capturing(size_t param) const;
  void check_not_capturing(size_t param, size_t buffer) const;
  // Buffer `buffer` of parameter `param`: undefined until created.
  Tensor& state_buffer(size_t param, size_t buffer) { return state_[param].buffers[buffer]; }
  // The buffer, created filled with zeros (the parameter's shape, dtype and device) when absent.
  Tensor& zero_buffer(size_t param, size_t buffer);
  // `active` split into the groups that one kernel call takes: same device and dtype, and the
  // same key(i) (the step count, say, on which Adam's bias correction depends). Usually one.
  std::vector<std::vector<size_t>> launches(const std::vector<size_t>& active,
                                            const std::function<int64_t(size_t)>& key) const;
  std::vector<TensorRef> param_refs(const std::vector<size_t>& run) const;
  // The gradients of `run`, made contiguous; `keep` holds the tensors while the refs are used.
  std::vector<TensorRef> grad_refs(const std::vector<size_t>& run, std::vector<Tensor>& keep) const;
  std::vector<TensorRef> buffer_refs(const std::vector<size_t>& run, size_t buffer) const;

 private:
  struct ParamState {
    int64_t step = 0;
    std::vector<Tensor> buffers;  // one per buffer name; undefined where absent
  };
  bool has_state(size_t param) const;
  // What a step counts on the host: step_count_, the step of every active parameter (when the
  // optimizer counts steps) and the versions of what the update writes.
  void count_step(const std::vector<size_t>& active);
  // Each hyperparameter's values, in the order of hypers_, and setting them back.
  std::vector<std::vector<double>> hyper_values() const;
  void set_hyper_values(const std::vector<std::vector<double>>& values);

  std::string name_;
  std::vector<Tensor> params_;
  double lr_;
  std::vector<std::string> buffer_names_;
  bool counts_steps_;
  std::vector<ParamState> state_;
  int64_t step_count_ = 0;
  std::vector<Hyper> hypers_;
  std::function<void()> check_hypers_;
};

namespace detail {
// The checks PyTorch's constructors make, shared by the optimizers (ValueError naming the
// optimizer, the hyperparameter and its value).
void check_non_negative(std::string_view optimizer, std::string_view what, double value);
void check_in_range(std::string_view optimizer, std::string_view what, double value, double low,
                    double high, bool high_inclusive);
}  // namespace detail

}  // namespace kiln::optim
