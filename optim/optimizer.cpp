#include "kiln/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <type_traits>

#include "kiln/autograd/node.h"
#include "kiln/core/backend.h"

namespace kiln::optim {

namespace {

const std::string kGroup = "param_groups.0.";
const std::string kState = "state.";

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// A fresh contiguous copy of `t` with the parameter's device and dtype: loaded state never
// aliases the caller's tensors.
Tensor copy_like(const Tensor& t, const Tensor& param) {
  Tensor out = empty(param.shape(), TensorOptions(param.dtype()).device(param.device()));
  out.copy_(t.device() == param.device() ? t : t.to(param.device()));
  return out;
}

}  // namespace

namespace detail {

void check_non_negative(std::string_view optimizer, std::string_view what, double value) {
  KILN_CHECK(value >= 0.0, ValueError, optimizer, ": invalid ", what, " ", value,
             " (it must be >= 0)");
}

void check_in_range(std::string_view optimizer, std::string_view what, double value, double low,
                    double high, bool high_inclusive) {
  const bool ok = value >= low && (high_inclusive ? value <= high : value < high);
  KILN_CHECK(ok, ValueError, optimizer, ": invalid ", what, " ", value, " (it must be in [", low,
             ", ", high, high_inclusive ? "])" : "))");
}

}  // namespace detail

Optimizer::Optimizer(std::string_view name, std::vector<Tensor> params, double lr,
                     std::vector<std::string> buffers, bool counts_steps)
    : name_(name), params_(std::move(params)), lr_(lr), buffer_names_(std::move(buffers)),
      counts_steps_(counts_steps) {
  KILN_CHECK(!params_.empty(), ValueError, name_, ": got an empty parameter list");
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    KILN_CHECK(p.defined(), ValueError, name_, ": parameter ", i, " is an undefined tensor");
    KILN_CHECK(p.is_leaf() && p.requires_grad(), ValueError, name_, ": parameter ", i,
               " (shape ", p.shape(), ") must be a leaf that requires grad; an optimizer updates "
               "the tensors that backward() fills, which are those");
  }
  detail::check_non_negative(name_, "learning rate", lr);
  state_.resize(params_.size());
  for (ParamState& s : state_) s.buffers.resize(buffer_names_.size());
}

void Optimizer::set_lr(double lr) {
  detail::check_non_negative(name_, "learning rate", lr);
  lr_ = lr;
}

void Optimizer::set_momentum(double) {
  KILN_FAIL(ValueError, name_, " has no momentum (nor betas) to set");
}

void Optimizer::step() {
  NoGradGuard no_grad;  // the update is not part of any graph
  std::vector<size_t> active;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    KILN_CHECK(g.dtype() == p.dtype() && g.device() == p.device(), DTypeError, name_,
               ": parameter ", i, " is ", p.dtype(), " on ", p.device(), " but its gradient is ",
               g.dtype(), " on ", g.device());
    KILN_CHECK(p.is_contiguous(), ValueError, name_, ": parameter ", i, " (shape ", p.shape(),
               ") is not contiguous; the step kernels update contiguous parameters in place");
    // State made for the parameter before Module::to moved it no longer fits.
    for (size_t b = 0; b < buffer_names_.size(); ++b) {
      const Tensor& s = state_[i].buffers[b];
      KILN_CHECK(!s.defined() || (s.device() == p.device() && s.dtype() == p.dtype() &&
                                  s.shape() == p.shape()),
                 DeviceError, name_, ": state ", buffer_names_[b], " of parameter ", i, " is ",
                 s.dtype(), " ", s.shape(), " on ", s.device(), " but the parameter is ", p.dtype(),
                 " ", p.shape(), " on ", p.device(), "; build the optimizer after moving the model");
    }
    active.push_back(i);
  }
  count_step(active);
  if (active.empty()) return;
  // Captured (core/capture.h), the update is recorded once and replayed: the counting above must
  // happen again at each replay, and update() hands the backend the hyperparameters of each
  // replay's step (`next`), computed after this hook has counted.
  if (Capture* capture = params_[active[0]].backend().capture())
    capture->on_replay([this, active] { count_step(active); });
  try {
    update(active);
  } catch (...) {  // nothing was updated (a captured step without its state, say): nor counted
    --step_count_;
    if (counts_steps_)
      for (size_t i : active) --state_[i].step;
    throw;
  }
}

void Optimizer::count_step(const std::vector<size_t>& active) {
  ++step_count_;
  for (size_t i : active) {
    if (counts_steps_) ++state_[i].step;
    // The update writes the parameters and their state in place: a graph that saved one of
    // them must refuse its backward from now on (autograd/node.h, check_saved).
    params_[i].storage()->bump_version();
    for (const Tensor& s : state_[i].buffers)
      if (s.defined()) s.storage()->bump_version();
  }
}

bool Optimizer::capturing(size_t param) const { return params_[param].backend().capture() != nullptr; }

void Optimizer::check_not_capturing(size_t param, size_t buffer) const {
  KILN_CHECK(!capturing(param), CaptureError, name_, ": parameter ", param, " has no ", buffer_names_[buffer],
             " yet, and a captured step cannot make it: the optimizer's state is made by the first step, "
             "which must run eagerly before the capture (optim::CapturedStep runs warm-up steps for this)");
}

void Optimizer::zero_grad() {
  for (const Tensor& p : params_) p.zero_grad();
}

Tensor& Optimizer::zero_buffer(size_t param, size_t buffer) {
  Tensor& b = state_[param].buffers[buffer];
  if (!b.defined()) {
    check_not_capturing(param, buffer);  // a captured fill would zero the state at every replay
    b = zeros_like(params_[param]);
  }
  return b;
}

std::vector<std::vector<size_t>> Optimizer::launches(const std::vector<size_t>& active,
                                                     const std::function<int64_t(size_t)>& key) const {
  std::vector<std::tuple<Device, DType, int64_t>> keys;
  std::vector<std::vector<size_t>> runs;
  for (size_t i : active) {
    auto k = std::make_tuple(params_[i].device(), params_[i].dtype(), key(i));
    auto it = std::find(keys.begin(), keys.end(), k);
    if (it == keys.end()) {
      keys.push_back(k);
      runs.emplace_back();
      it = keys.end() - 1;
    }
    runs[static_cast<size_t>(it - keys.begin())].push_back(i);
  }
  return runs;
}

std::vector<TensorRef> Optimizer::param_refs(const std::vector<size_t>& run) const {
  std::vector<TensorRef> refs;
  for (size_t i : run) refs.push_back(params_[i].ref());
  return refs;
}

std::vector<TensorRef> Optimizer::grad_refs(const std::vector<size_t>& run,
                                            std::vector<Tensor>& keep) const {
  std::vector<TensorRef> refs;
  for (size_t i : run) {
    keep.push_back(params_[i].grad().contiguous());  // a transposed view's gradient may be strided
    refs.push_back(keep.back().ref());
  }
  return refs;
}

std::vector<TensorRef> Optimizer::buffer_refs(const std::vector<size_t>& run, size_t buffer) const {
  std::vector<TensorRef> refs;
  for (size_t i : run) refs.push_back(state_[i].buffers[buffer].ref());
  return refs;
}

bool Optimizer::has_state(size_t param) const {
  const ParamState& s = state_[param];
  return s.step > 0 || std::any_of(s.buffers.begin(), s.buffers.end(),
                                   [](const Tensor& t) { return t.defined(); });
}

void Optimizer::declare_hypers(std::vector<Hyper> hypers, std::function<void()> check) {
  hypers_ = std::move(hypers);
  check_hypers_ = std::move(check);
  check_hypers_();
}

std::vector<std::vector<double>> Optimizer::hyper_values() const {
  std::vector<std::vector<double>> out;
  for (const Hyper& h : hypers_) {
    out.push_back(std::visit(
        [](auto* field) -> std::vector<double> {
          using T = std::remove_pointer_t<decltype(field)>;
          if constexpr (std::is_same_v<T, bool>) return {*field ? 1.0 : 0.0};
          else if constexpr (std::is_same_v<T, double>) return {*field};
          else return {field->first, field->second};
        },
        h.field));
  }
  return out;
}

void Optimizer::set_hyper_values(const std::vector<std::vector<double>>& values) {
  for (size_t i = 0; i < hypers_.size(); ++i) {
    const std::vector<double>& v = values[i];
    std::visit(
        [&v](auto* field) {
          using T = std::remove_pointer_t<decltype(field)>;
          if constexpr (std::is_same_v<T, bool>) *field = v[0] != 0.0;
          else if constexpr (std::is_same_v<T, double>) *field = v[0];
          else *field = {v[0], v[1]};
        },
        hypers_[i].field);
  }
}

void Optimizer::change_hypers(const std::function<void()>& change) {
  const std::vector<std::vector<double>> before = hyper_values();
  try {
    change();
    check_hypers_();
  } catch (...) {
    set_hyper_values(before);
    throw;
  }
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!has_state(i)) continue;
    const std::string prefix = kState + std::to_string(i) + ".";
    if (counts_steps_)
      out.emplace_back(prefix + "step", scalar(static_cast<double>(state_[i].step), DType::f64));
    for (size_t b = 0; b < buffer_names_.size(); ++b)
      if (state_[i].buffers[b].defined()) out.emplace_back(prefix + buffer_names_[b], state_[i].buffers[b]);
  }
  out.emplace_back(kGroup + "lr", scalar(lr_, DType::f64));
  const std::vector<std::vector<double>> values = hyper_values();
  for (size_t h = 0; h < hypers_.size(); ++h) {
    const std::vector<double>& v = values[h];
    Tensor t = v.size() == 1 ? scalar(v[0], DType::f64) : from_vector<double>(v, Shape{static_cast<int64_t>(v.size())});
    out.emplace_back(kGroup + hypers_[h].name, t);
  }
  return out;
}

void Optimizer::load_state_dict(const StateDict& dict) {
  const std::string where = name_ + " load_state_dict: ";
  std::map<std::string, Tensor> by_key;
  for (const auto& [key, t] : dict) {
    KILN_CHECK(t.defined(), ValueError, where, "key '", key, "' holds an undefined tensor");
    KILN_CHECK(by_key.emplace(key, t).second, ValueError, where, "duplicate key '", key, "'");
  }

  // Hyperparameters: every one this optimizer has, each with its number of values.
  auto read = [&](const std::string& hyper, size_t count) {
    const std::string key = kGroup + hyper;
    auto it = by_key.find(key);
    KILN_CHECK(it != by_key.end(), ValueError, where, "missing key '", key, "' (", name_,
               " saves every hyperparameter)");
    KILN_CHECK(it->second.numel() == static_cast<int64_t>(count), ShapeError, where, "key '", key,
               "' holds ", it->second.numel(), " values (shape ", it->second.shape(), "), expected ",
               count);
    return it->second.to_vector<double>();
  };
  const double lr = read("lr", 1)[0];
  detail::check_non_negative(name_, "learning rate (key '" + kGroup + "lr')", lr);
  const std::vector<std::vector<double>> old_values = hyper_values();
  std::vector<std::vector<double>> values = old_values;
  for (size_t h = 0; h < hypers_.size(); ++h) values[h] = read(hypers_[h].name, values[h].size());

  // Every key must be one this optimizer writes.
  for (const auto& [key, t] : by_key) {
    if (starts_with(key, kGroup)) {
      const std::string hyper = key.substr(kGroup.size());
      const bool known = hyper == "lr" || std::any_of(hypers_.begin(), hypers_.end(),
                                                      [&](const Hyper& h) { return h.name == hyper; });
      KILN_CHECK(known, ValueError, where, "unexpected key '", key, "': ", name_,
                 " has no hyperparameter '", hyper, "'");
      continue;
    }
    KILN_CHECK(starts_with(key, kState), ValueError, where, "unexpected key '", key,
               "': keys start with '", kState, "' or '", kGroup, "'");
    const std::string rest = key.substr(kState.size());
    const size_t dot = rest.find('.');
    const std::string index = rest.substr(0, dot);
    KILN_CHECK(dot != std::string::npos && !index.empty() && index.size() < 10 &&
                   std::all_of(index.begin(), index.end(), [](char c) { return c >= '0' && c <= '9'; }),
               ValueError, where, "unexpected key '", key, "': state keys read 'state.<parameter index>.<name>'");
    const size_t i = std::stoul(index);
    KILN_CHECK(i < params_.size(), ValueError, where, "unexpected key '", key, "': parameter ", i,
               " does not exist, the optimizer has ", params_.size(), " parameters");
    const std::string buffer = rest.substr(dot + 1);
    const bool known = (counts_steps_ && buffer == "step") ||
                       std::find(buffer_names_.begin(), buffer_names_.end(), buffer) != buffer_names_.end();
    KILN_CHECK(known, ValueError, where, "unexpected key '", key, "': ", name_,
               " keeps no state named '", buffer, "'");
  }

  // The buffers a parameter must have depend on the hyperparameters (Adam's amsgrad), so these
  // apply first; change_hypers validates them and changes nothing when it throws.
  change_hypers([&] { set_hyper_values(values); });
  try {
    std::vector<ParamState> state(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      ParamState& s = state[i];
      s.buffers.resize(buffer_names_.size());
      const std::string prefix = kState + std::to_string(i) + ".";
      const Tensor& p = params_[i];
      bool any = by_key.count(prefix + "step") != 0;
      for (const std::string& b : buffer_names_) any = any || by_key.count(prefix + b) != 0;
      if (!any) continue;  // a parameter that never had a gradient

      if (counts_steps_) {
        auto it = by_key.find(prefix + "step");
        KILN_CHECK(it != by_key.end(), ValueError, where, "missing key '", prefix, "step' (",
                   name_, " counts the steps of every parameter that has state)");
        KILN_CHECK(it->second.numel() == 1, ShapeError, where, "key '", prefix, "step' has shape ",
                   it->second.shape(), ", expected one element");
        const double step = it->second.item();
        KILN_CHECK(step >= 0 && step == std::floor(step) && step < 9.0e15, ValueError, where,
                   "key '", prefix, "step' holds ", step, ", expected a whole number >= 0");
        s.step = static_cast<int64_t>(step);
      }
      for (size_t b = 0; b < buffer_names_.size(); ++b) {
        const std::string key = prefix + buffer_names_[b];
        auto it = by_key.find(key);
        const Presence rule = presence(b);
        KILN_CHECK(it != by_key.end() || rule != Presence::required, ValueError, where,
                   "missing key '", key, "' (", name_, " keeps ", buffer_names_[b],
                   " for every parameter that has state, with the hyperparameters loaded)");
        if (it == by_key.end()) continue;
        KILN_CHECK(rule != Presence::absent, ValueError, where, "unexpected key '", key, "': ",
                   name_, " keeps no ", buffer_names_[b], " with the hyperparameters loaded");
        KILN_CHECK(it->second.shape() == p.shape(), ShapeError, where, "key '", key, "' has shape ",
                   it->second.shape(), " but parameter ", i, " has shape ", p.shape());
        s.buffers[b] = copy_like(it->second, p);
      }
    }
    lr_ = lr;
    state_ = std::move(state);
  } catch (...) {
    set_hyper_values(old_values);
    throw;
  }
}

}  // namespace kiln::optim
