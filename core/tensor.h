// Tensor: a handle to shared storage plus a view of it (shape, strides, offset), a dtype, a
// device, and the autograd slots (requires_grad, grad, the node that produced it).
//
// Copying a Tensor copies the handle, as in PyTorch: both refer to the same data. Views
// (reshape, transpose, slice, ...) share storage with their base; contiguous() and clone() copy.
// core records no autograd graph and runs no op: the math lives in the functional ops
// (autograd/ops.h), and the methods below marked "ops" are their usual shortcuts, defined with
// them in the autograd layer (autograd/tensor_methods.cpp). A program linked without that layer
// has tensors, storage, factories and host access, but not those methods.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/shape.h"

namespace kiln {

class Backend;
class PendingRead;
class PendingValues;
struct TensorRef;

// What core knows of the autograd node that produced a tensor: its op's name. The node itself
// (autograd::Node, autograd/node.h) derives from this and holds the graph.
struct GradFn {
  std::string_view op;
  virtual ~GradFn() = default;
};

namespace detail {
// Grad mode, per thread: whether ops record autograd nodes. autograd owns it (is_grad_enabled and
// NoGradGuard, autograd/node.h); it lives here because copy_ and fill_ read it.
bool grad_mode();
void set_grad_mode(bool on);
}  // namespace detail

// Device memory owned through a shared pointer; freed by its backend when the last view goes.
class Storage {
 public:
  Storage(Device device, size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  const Device& device() const { return device_; }
  Backend& backend() const { return *backend_; }

  // How many in-place writes its contents have had: copy_, fill_, an optimizer's step, a gradient
  // added into grad(), ... each add one. Every view of the storage sees the same count. autograd
  // notes it when an op saves a tensor for backward, and backward refuses when it moved on
  // (autograd/node.h). A host counter: reading or bumping it never waits for the device.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  Device device_;
  Backend* backend_;
  size_t bytes_;
  void* data_;
  std::atomic<uint64_t> version_{0};
};

struct TensorOptions {
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu();
  bool requires_grad_ = false;

  TensorOptions() = default;
  TensorOptions(DType t) : dtype_(t) {}                    // NOLINT: kiln::zeros({2}, DType::f64)
  TensorOptions(Device d) : device_(d) {}                  // NOLINT: kiln::zeros({2}, Device::cpu())
  TensorOptions& dtype(DType t) { dtype_ = t; return *this; }
  TensorOptions& device(Device d) { device_ = d; return *this; }
  TensorOptions& requires_grad(bool r = true) { requires_grad_ = r; return *this; }
};

struct TensorImpl;

class Tensor {
 public:
  Tensor() = default;  // undefined: no storage; most calls on it throw
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Strides& strides() const;
  int64_t offset() const;
  int64_t dim() const { return shape().rank(); }
  int64_t size(int64_t axis) const;  // negative axes count from the end
  int64_t numel() const { return shape().numel(); }
  DType dtype() const;
  Device device() const;
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const;
  Backend& backend() const;
  TensorRef ref() const;  // what a backend kernel sees of this tensor

  // ---- autograd ----
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true);  // only on leaves: tensors no op produced
  bool is_leaf() const;
  Tensor grad() const;                  // accumulated gradient; undefined until a backward reaches it
  void set_grad(const Tensor& grad) const;
  void zero_grad() const;               // drops the gradient (the next backward starts from nothing)
  const std::shared_ptr<GradFn>& grad_fn() const;  // null on leaves
  // Accumulates d(this)/d(leaf) into every leaf's grad(). Without `grad`, this must hold one
  // element. The graph is freed afterwards unless retain_graph. (autograd/engine.cpp)
  void backward(const Tensor& grad = {}, bool retain_graph = false) const;
  Tensor detach() const;  // same data, cut from the graph (and without this tensor's hooks)
  uint64_t version() const { return storage()->version(); }  // its storage's in-place writes
  // Calls hook(leaf) in every backward() that reaches this leaf, once its gradient for that
  // backward is final: after the last gradient the walk sends it has been added to grad().
  // How data-parallel training learns, during backward, that a parameter's gradient can be
  // all-reduced (PyTorch's register_post_accumulate_grad_hook). Only on a leaf that requires
  // grad. A leaf's hooks run in registration order, with grad mode off; `leaf` shares this
  // tensor's impl (use it rather than capture a copy of this tensor, which would keep the tensor
  // alive through its own hook). An exception from a hook propagates out of backward(). A hook
  // added or removed while a backward runs is certain to count from the next one. Hooks survive
  // set_data (Module::to). Returns a handle, unique in the process (never 0).
  uint64_t register_post_accumulate_grad_hook(std::function<void(const Tensor& leaf)> hook) const;
  // Removes the hook registered on this tensor under `handle`. A handle that names no hook of
  // this tensor (already removed, or another tensor's) is a no-op, so removing is idempotent.
  void remove_post_accumulate_grad_hook(uint64_t handle) const;

  // ---- host access (each is a synchronisation point) ----
  double item() const;  // the single element, converted to double
  template <class T> T item() const { return static_cast<T>(item()); }
  template <class T> std::vector<T> to_vector() const;  // every element in row-major order
  // The same read queued behind the work before it, collected later: no synchronisation until
  // the returned values' get(). How a loop reads results without draining the device.
  PendingValues read_async() const;
  std::string str() const;  // values and metadata, as PyTorch prints them

  // ---- conversions and copies (ops: they record a node, so gradients flow through) ----
  Tensor to(const Device& device) const;
  Tensor to(DType dtype) const;
  Tensor contiguous() const;  // itself when already contiguous
  Tensor clone() const;       // a contiguous copy
  // ---- in place, no autograd node ----
  // Each write bumps the storage's version, so a backward that needs the old values refuses.
  // While grad mode is on, a tensor that requires grad is refused (AutogradError): a leaf, as
  // PyTorch refuses, and an op's result too, since kiln records no node for the write and the
  // graph could not follow it. Write parameters under NoGradGuard, as optimizers and init do.
  Tensor& copy_(const Tensor& src);  // broadcasting src
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  // this = this + alpha * other (and the others alike), libtorch's in-place arithmetic: other of
  // this tensor's dtype, broadcast to its shape, on its device. One kernel each (add_ and sub_
  // with alpha != 1: two). A tensor whose elements share memory (an expand()ed view) is refused.
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& sub_(const Tensor& other, double alpha = 1.0);
  Tensor& mul_(const Tensor& other);
  Tensor& div_(const Tensor& other);
  Tensor& add_(double value);
  Tensor& mul_(double value);
  // Makes this tensor (every handle to it) refer to src's data, shape and dtype; keeps its
  // autograd identity (requires_grad, grad). How Module::to moves parameters without breaking
  // the handles layers and optimizers hold. No autograd node, and no write: the old storage is
  // left as it was, so a graph that saved this tensor still holds the values its forward used.
  void set_data(const Tensor& src);

  // ---- views (ops; they share storage; see autograd/ops.h) ----
  Tensor reshape(const Shape& shape) const;
  Tensor view(const Shape& shape) const;
  Tensor flatten(int64_t start = 0, int64_t end = -1) const;
  Tensor transpose(int64_t a, int64_t b) const;
  Tensor t() const { return transpose(0, 1); }
  Tensor permute(const std::vector<int64_t>& order) const;
  Tensor slice(int64_t axis, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor squeeze(int64_t axis) const;
  Tensor unsqueeze(int64_t axis) const;
  Tensor expand(const Shape& shape) const;

  // ---- reductions and products (ops; see autograd/ops.h) ----
  Tensor sum(const std::vector<int64_t>& axes = {}, bool keepdim = false) const;
  Tensor mean(const std::vector<int64_t>& axes = {}, bool keepdim = false) const;
  Tensor max(const std::vector<int64_t>& axes = {}, bool keepdim = false) const;
  Tensor min(const std::vector<int64_t>& axes = {}, bool keepdim = false) const;
  Tensor argmax(int64_t axis, bool keepdim = false) const;
  Tensor matmul(const Tensor& other) const;

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;

  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<GradFn> grad_fn;  // set on tensors that an op produced under autograd
  // A leaf's post-accumulate-grad hooks under their handles, in registration order; the engine
  // (autograd/engine.cpp) calls them. Tensor::register_post_accumulate_grad_hook adds to it.
  std::vector<std::pair<uint64_t, std::function<void(const Tensor&)>>> post_accumulate_grad_hooks;
};

std::ostream& operator<<(std::ostream& out, const Tensor& t);

// A tensor's elements on their way to the host (Tensor::read_async): the copy was queued behind
// the work before it and the host went on. get() waits for it (and throws a fault the device
// found, as item() would); ready() asks without waiting. The read holds what it copies, so the
// tensor may go meanwhile. A training loop reads each progress update's losses this way and
// looks at them one update later, so the device never runs dry while the host waits.
class PendingValues {
 public:
  bool ready() const;  // the copy has landed: get() will not wait
  // Waits for the copy, then returns every element in row-major order, converted to T.
  template <class T> std::vector<T> get() const;

 private:
  friend class Tensor;
  std::shared_ptr<PendingRead> read_;  // null: a PendingValues no read_async returned
  Tensor source_;                      // the contiguous tensor copied from, kept until this goes
  DType dtype_ = DType::f32;
  size_t count_ = 0;
};

// ---- factories ----
Tensor empty(const Shape& shape, const TensorOptions& options = {});
Tensor zeros(const Shape& shape, const TensorOptions& options = {});
Tensor ones(const Shape& shape, const TensorOptions& options = {});
Tensor full(const Shape& shape, double value, const TensorOptions& options = {});
Tensor scalar(double value, const TensorOptions& options = {});  // rank 0
// [start, end) in steps of `step`, like PyTorch's arange.
Tensor arange(double start, double end, double step = 1.0, const TensorOptions& options = {});
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
// Copies host values into a new tensor; values.size() must equal shape.numel(). The dtype is
// T's unless the options name another.
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape,
                   TensorOptions options = TensorOptions(dtype_of_v<T>));

// Tensors under names, in a fixed order: a module's parameters, a state dict, a checkpoint.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// t's values in a new contiguous tensor of `dtype` on t's device, converted by the backend's copy
// (as a C++ cast): a copy that records no autograd node. The ops clone() and to(dtype) record one
// on top of it.
Tensor dense_copy(const Tensor& t, DType dtype);

// x's TensorRef seen with `shape`, a shape x broadcasts to: stride 0 where x repeats.
TensorRef broadcast_ref(const Tensor& x, const Shape& shape);

// A view of `base` with the given layout, sharing storage (no checks: internal building block).
Tensor make_view(const Tensor& base, Shape shape, Strides strides, int64_t offset);

}  // namespace kiln
