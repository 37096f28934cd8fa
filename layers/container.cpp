#include "kiln/layers/container.h"

#include <typeinfo>

#include "kiln/layers/activation.h"
#include "kiln/layers/conv.h"
#include "kiln/layers/linear.h"

namespace kiln::nn {

Tensor Flatten::forward(const Tensor& x) { return flatten(x, start_dim, end_dim); }

std::string Flatten::extra_repr() const { return detail::concat("start_dim=", start_dim, ", end_dim=", end_dim); }

Tensor Unflatten::forward(const Tensor& x) {
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  KILN_CHECK(d >= 0 && d < x.dim(), ValueError, "Unflatten: dim ", dim, " is outside the input ", x.shape());
  KILN_CHECK(!sizes.empty(), ValueError, "Unflatten: no sizes to unflatten dimension ", dim, " into");
  Shape shape;
  for (int64_t i = 0; i < x.dim(); ++i)
    if (i == d)
      for (int64_t size : sizes) shape.push_back(size);
    else
      shape.push_back(x.size(i));
  return x.reshape(shape);  // its own error when the sizes do not make dimension dim
}

std::string Unflatten::extra_repr() const {
  std::string s = "dim=" + std::to_string(dim) + ", unflattened_size=(";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + ")";
}

const std::shared_ptr<Module>& ModuleList::operator[](size_t i) const {
  KILN_CHECK(i < size(), ValueError, name(), "[", i, "]: it holds ", size(), " modules");
  return named_children()[i].second;
}

ModuleDict::ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules) {
  for (const auto& [key, module] : modules) insert(key, module);
}

bool ModuleDict::contains(const std::string& key) const {
  for (const auto& [name, module] : named_children())
    if (name == key) return true;
  return false;
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [name, module] : named_children()) out.push_back(name);
  return out;
}

const std::shared_ptr<Module>& ModuleDict::operator[](const std::string& key) const {
  for (const auto& [name, module] : named_children())
    if (name == key) return module;
  std::string held;
  for (const std::string& k : keys()) held += (held.empty() ? "'" : ", '") + k + "'";
  KILN_FAIL(ValueError, name(), ": no module under '", key, "' (it holds ", held.empty() ? "none" : held, ")");
}

Tensor Sequential::forward(const Tensor& x) {
  const auto& children = named_children();
  Tensor y = x;
  for (size_t i = 0; i < children.size(); ++i) {
    Module& m = *children[i].second;
    const Module* next = i + 1 < children.size() ? children[i + 1].second.get() : nullptr;
    // (a module with hooks is called on its own, so that its hooks see what they would unfused)
    const bool relu_next = next && typeid(*next) == typeid(ReLU) && !m.has_hooks() && !next->has_hooks();
    if (relu_next && typeid(m) == typeid(Linear)) {
      y = static_cast<Linear&>(m).forward(y, Activation::relu);
      ++i;
    } else if (relu_next && typeid(m) == typeid(Conv2d)) {
      y = static_cast<Conv2d&>(m).forward(y, Activation::relu);
      ++i;
    } else {
      y = m(y);
    }
  }
  return y;
}

}  // namespace kiln::nn
