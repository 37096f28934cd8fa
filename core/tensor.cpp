#include "kiln/core/tensor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "kiln/core/backend.h"

namespace kiln {

// ---- Storage ----

Storage::Storage(Device device, size_t bytes)
    : device_(device), backend_(&backend_for(device)), bytes_(bytes), data_(backend_->allocate(bytes)) {}

Storage::~Storage() { backend_->deallocate(data_); }

// ---- grad mode ----

namespace {
thread_local bool grad_enabled = true;
}  // namespace

bool detail::grad_mode() { return grad_enabled; }
void detail::set_grad_mode(bool on) { grad_enabled = on; }

// ---- metadata ----

namespace {
const TensorImpl& checked(const std::shared_ptr<TensorImpl>& impl) {
  KILN_CHECK(impl != nullptr, ValueError, "this tensor is undefined (default-constructed, or an "
             "absent gradient): it has no shape, dtype or data");
  return *impl;
}
}  // namespace

const Shape& Tensor::shape() const { return checked(impl_).shape; }
const Strides& Tensor::strides() const { return checked(impl_).strides; }
int64_t Tensor::offset() const { return checked(impl_).offset; }
DType Tensor::dtype() const { return checked(impl_).dtype; }
Device Tensor::device() const { return checked(impl_).storage->device(); }
const std::shared_ptr<Storage>& Tensor::storage() const { return checked(impl_).storage; }
Backend& Tensor::backend() const { return storage()->backend(); }

int64_t Tensor::size(int64_t axis) const { return shape()[normalize_axis(axis, dim(), "size")]; }

bool Tensor::is_contiguous() const { return ref().is_contiguous(); }

TensorRef Tensor::ref() const {
  const TensorImpl& t = checked(impl_);
  return TensorRef{t.storage->data(), t.offset, t.shape, t.strides, t.dtype};
}

// ---- autograd ----

bool Tensor::requires_grad() const { return checked(impl_).requires_grad; }

Tensor& Tensor::requires_grad_(bool on) {
  checked(impl_);
  KILN_CHECK(is_leaf(), AutogradError, "requires_grad_: only leaf tensors (made by the user, not "
             "by an op) can change requires_grad; use detach() for a leaf copy of this one");
  KILN_CHECK(!on || is_floating(dtype()), DTypeError, "requires_grad_: only floating-point "
             "tensors can require gradients, this one is ", dtype());
  impl_->requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const { return checked(impl_).grad_fn == nullptr; }
Tensor Tensor::grad() const { return checked(impl_).grad; }
void Tensor::set_grad(const Tensor& grad) const {
  checked(impl_);
  KILN_CHECK(!grad.defined() || grad.shape() == shape(), ShapeError, "set_grad: gradient of shape ",
             grad.shape(), " for a tensor of shape ", shape());
  impl_->grad = grad;
}
void Tensor::zero_grad() const { checked(impl_); impl_->grad = Tensor(); }
const std::shared_ptr<GradFn>& Tensor::grad_fn() const { return checked(impl_).grad_fn; }

uint64_t Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  checked(impl_);
  KILN_CHECK(is_leaf(), AutogradError, "register_post_accumulate_grad_hook: only a leaf "
             "accumulates a gradient, and this tensor was produced by '", grad_fn()->op, "'; hook "
             "the leaves it was computed from");
  KILN_CHECK(requires_grad(), AutogradError, "register_post_accumulate_grad_hook: the leaf of "
             "shape ", shape(), " does not require grad, so no backward accumulates into it; call "
             "requires_grad_() first");
  KILN_CHECK(hook != nullptr, ValueError, "register_post_accumulate_grad_hook: the hook is empty");
  static std::atomic<uint64_t> next_handle{1};  // 0 is never a handle
  uint64_t handle = next_handle.fetch_add(1, std::memory_order_relaxed);
  impl_->post_accumulate_grad_hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void Tensor::remove_post_accumulate_grad_hook(uint64_t handle) const {
  checked(impl_);
  std::erase_if(impl_->post_accumulate_grad_hooks, [handle](const auto& h) { return h.first == handle; });
}

Tensor Tensor::detach() const {
  const TensorImpl& t = checked(impl_);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.storage;
  impl->shape = t.shape;
  impl->strides = t.strides;
  impl->offset = t.offset;
  impl->dtype = t.dtype;
  return Tensor(std::move(impl));
}

// ---- host access ----

Tensor dense_copy(const Tensor& t, DType dtype) {
  Tensor c = empty(t.shape(), TensorOptions(dtype).device(t.device()));
  t.backend().copy(t.ref(), c.ref());
  return c;
}

namespace {
// `count` elements of `dtype` as they lie in host memory, converted to T.
template <class T>
std::vector<T> converted(const void* bytes, DType dtype, size_t count) {
  std::vector<T> out(count);
  visit_dtype(dtype, [&](auto tag) {
    using S = decltype(tag);
    const auto* raw = static_cast<const std::byte*>(bytes);
    for (size_t i = 0; i < count; ++i) {
      S v;
      std::memcpy(&v, raw + i * sizeof(S), sizeof(S));  // host bytes in no particular alignment
      out[i] = static_cast<T>(v);
    }
  });
  return out;
}

// t itself when contiguous, else a contiguous copy: what a read copies from.
Tensor readable(const Tensor& t) { return t.is_contiguous() ? t : dense_copy(t, t.dtype()); }

// Every element of t in row-major order, converted to T.
template <class T>
std::vector<T> read_all(const Tensor& t) {
  const Tensor c = readable(t);
  const size_t bytes = static_cast<size_t>(c.numel()) * dtype_size(c.dtype());
  std::vector<std::byte> raw(bytes);
  c.backend().read(c.storage()->data(), static_cast<size_t>(c.offset()) * dtype_size(c.dtype()), raw.data(), bytes);
  return converted<T>(raw.data(), c.dtype(), static_cast<size_t>(c.numel()));
}
}  // namespace

double Tensor::item() const {
  KILN_CHECK(numel() == 1, ValueError, "item: the tensor has shape ", shape(), " (", numel(),
             " elements); item() reads a tensor of exactly one element");
  return read_all<double>(*this)[0];
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  return read_all<T>(*this);
}

PendingValues Tensor::read_async() const {
  PendingValues p;
  p.source_ = readable(*this);
  p.dtype_ = dtype();
  p.count_ = static_cast<size_t>(numel());
  const size_t element = dtype_size(p.dtype_);
  p.read_ = p.source_.backend().read_async(p.source_.storage()->data(),
                                           static_cast<size_t>(p.source_.offset()) * element, p.count_ * element);
  return p;
}

bool PendingValues::ready() const {
  KILN_CHECK(read_ != nullptr, ValueError, "PendingValues: no read was started (only Tensor::read_async starts one)");
  return read_->ready();
}

template <class T>
std::vector<T> PendingValues::get() const {
  KILN_CHECK(read_ != nullptr, ValueError, "PendingValues: no read was started (only Tensor::read_async starts one)");
  return converted<T>(read_->wait(), dtype_, count_);
}

template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<float> PendingValues::get<float>() const;
template std::vector<double> PendingValues::get<double>() const;
template std::vector<int32_t> PendingValues::get<int32_t>() const;
template std::vector<uint8_t> PendingValues::get<uint8_t>() const;
template std::vector<int64_t> PendingValues::get<int64_t>() const;

namespace {
// PyTorch's layout: nested brackets, at most 3 + 3 entries per axis once a tensor is large.
void print_values(std::ostream& out, const std::vector<double>& v, const Shape& shape, size_t axis,
                  int64_t base, int64_t stride, bool summarize, bool floating, int indent) {
  if (shape.empty()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, floating ? "%.4f" : "%.0f", v[static_cast<size_t>(base)]);
    out << buf;
    return;
  }
  int64_t n = shape[axis];
  int64_t inner = stride / std::max<int64_t>(n, 1);
  out << '[';
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 6 && i == 3) {
      out << "...";
      i = n - 3;
      out << (axis + 1 == shape.size() ? ", " : ",\n" + std::string(static_cast<size_t>(indent + 1), ' '));
    }
    if (axis + 1 == shape.size()) {
      char buf[32];
      std::snprintf(buf, sizeof buf, floating ? "%.4f" : "%.0f", v[static_cast<size_t>(base + i)]);
      out << buf;
    } else {
      print_values(out, v, shape, axis + 1, base + i * inner, inner, summarize, floating, indent + 1);
    }
    if (i + 1 < n)
      out << (axis + 1 == shape.size() ? ", " : ",\n" + std::string(static_cast<size_t>(indent + 1), ' '));
  }
  out << ']';
}
}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream out;
  std::vector<double> v = to_vector<double>();
  out << "tensor(";
  print_values(out, v, shape(), 0, 0, numel(), numel() > 1000, is_floating(dtype()), 7);
  out << ", shape=" << shape() << ", dtype=" << dtype();
  if (!device().is_cpu()) out << ", device=" << device();
  if (!is_leaf()) out << ", grad_fn=" << grad_fn()->op;
  else if (requires_grad()) out << ", requires_grad";
  out << ")";
  return out.str();
}

std::ostream& operator<<(std::ostream& out, const Tensor& t) { return out << t.str(); }

// ---- in place ----

namespace {
// The rule of copy_ and fill_: no in-place write that the autograd graph would have to follow.
void check_writable(const Tensor& t, const char* op) {
  if (!detail::grad_mode() || !t.requires_grad()) return;
  KILN_CHECK(!t.is_leaf(), AutogradError, op, ": a leaf tensor that requires grad (", t.shape(), " ", t.dtype(),
             ") cannot be written in place while grad mode is on; write it under NoGradGuard (as optimizers "
             "and init do)");
  KILN_FAIL(AutogradError, op, ": the result of '", t.grad_fn()->op, "' (", t.shape(), " ", t.dtype(), ") requires "
            "grad, and kiln records no autograd node for an in-place write, so backward could not follow it; "
            "compute a new tensor instead, or write under NoGradGuard if the graph must not see the write");
}
}  // namespace

Tensor& Tensor::copy_(const Tensor& src) {
  KILN_CHECK(src.device() == device(), DeviceError, "copy_: source on ", src.device(),
             ", destination on ", device(), "; move it first with .to(device)");
  KILN_CHECK(broadcast_shapes(src.shape(), shape(), "copy_") == shape(), ShapeError, "copy_: a source of shape ",
             src.shape(), " does not broadcast to the destination's shape ", shape());
  check_writable(*this, "copy_");
  backend().copy(broadcast_ref(src, shape()), ref());
  storage()->bump_version();
  return *this;
}

namespace {
// What any in-place arithmetic op asks of the tensor it writes, given the scalar it multiplies or
// adds (alpha, or the value): a dtype with arithmetic, a whole number for an integer tensor, each
// element its own memory, and nothing autograd would have to follow (copy_'s rule).
void check_in_place_target(const Tensor& t, double scalar, const char* op) {
  KILN_CHECK(t.dtype() != DType::u8, DTypeError, op, ": u8 tensors take no arithmetic; convert with "
             ".to(DType::f32) or .to(DType::i32) first");
  KILN_CHECK(is_floating(t.dtype()) || scalar == std::trunc(scalar), ValueError, op, ": ", t.dtype(),
             " tensors take whole-number scalars, got ", scalar);
  for (int64_t a = 0; a < t.dim(); ++a)
    KILN_CHECK(t.strides()[static_cast<size_t>(a)] != 0 || t.size(a) <= 1, ValueError, op, ": the tensor (",
               t.shape(), ", strides ", t.strides(), ") repeats its elements along axis ", a, ", so the write would "
               "land on one element several times; write a contiguous() copy instead");
  check_writable(t, op);
}

// The operand an in-place binary op reads: other, or a copy of it where it shares memory with t
// but is not t itself (element i's write would change what a later element reads).
Tensor in_place_operand(const Tensor& t, const Tensor& other, const char* op) {
  KILN_CHECK(other.device() == t.device(), DeviceError, op, ": operand on ", other.device(), ", tensor on ",
             t.device(), "; move it first with .to(device)");
  KILN_CHECK(other.dtype() == t.dtype(), DTypeError, op, ": an operand of dtype ", other.dtype(), " for a tensor of ",
             t.dtype(), "; convert it with .to(", t.dtype(), ")");
  KILN_CHECK(broadcast_shapes(other.shape(), t.shape(), op) == t.shape(), ShapeError, op, ": an operand of shape ",
             other.shape(), " does not broadcast to the tensor's shape ", t.shape());
  const bool same_view = other.storage() == t.storage() && other.offset() == t.offset() &&
                         other.shape() == t.shape() && other.strides() == t.strides();
  if (other.storage() != t.storage() || same_view) return other;
  Tensor copy = empty(other.shape(), TensorOptions(other.dtype()).device(other.device()));
  t.backend().copy(other.ref(), copy.ref());
  return copy;
}

Tensor& binary_in_place(Tensor& t, BinaryOp op, const Tensor& other, double alpha, const char* name) {
  check_in_place_target(t, alpha, name);
  const Tensor operand = in_place_operand(t, other, name);
  TensorRef b = broadcast_ref(operand, t.shape());
  Tensor scaled;  // alpha * other, where alpha is not 1
  if (alpha != 1.0) {
    scaled = empty(t.shape(), TensorOptions(t.dtype()).device(t.device()));
    t.backend().unary(UnaryOp::mul_scalar, b, scaled.ref(), alpha);
    b = scaled.ref();
  }
  t.backend().binary(op, t.ref(), b, t.ref());
  t.storage()->bump_version();
  return t;
}

Tensor& unary_in_place(Tensor& t, UnaryOp op, double value, const char* name) {
  check_in_place_target(t, value, name);
  t.backend().unary(op, t.ref(), t.ref(), value);
  t.storage()->bump_version();
  return t;
}
}  // namespace

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  return binary_in_place(*this, BinaryOp::add, other, alpha, "add_");
}
Tensor& Tensor::sub_(const Tensor& other, double alpha) {
  return binary_in_place(*this, BinaryOp::sub, other, alpha, "sub_");
}
Tensor& Tensor::mul_(const Tensor& other) { return binary_in_place(*this, BinaryOp::mul, other, 1.0, "mul_"); }
Tensor& Tensor::div_(const Tensor& other) { return binary_in_place(*this, BinaryOp::div, other, 1.0, "div_"); }
Tensor& Tensor::add_(double value) { return unary_in_place(*this, UnaryOp::add_scalar, value, "add_"); }
Tensor& Tensor::mul_(double value) { return unary_in_place(*this, UnaryOp::mul_scalar, value, "mul_"); }

void Tensor::set_data(const Tensor& src) {
  checked(impl_);
  const TensorImpl& from = checked(src.impl_ptr());
  KILN_CHECK(!impl_->requires_grad || is_floating(from.dtype), DTypeError, "set_data: a tensor "
             "that requires grad must stay floating-point, got ", from.dtype);
  impl_->storage = from.storage;
  impl_->shape = from.shape;
  impl_->strides = from.strides;
  impl_->offset = from.offset;
  impl_->dtype = from.dtype;
  if (impl_->grad.defined() && (impl_->grad.device() != from.storage->device() || impl_->grad.dtype() != from.dtype))
    impl_->grad = Tensor();  // a gradient on the old device or dtype no longer fits
}

Tensor& Tensor::fill_(double value) {
  check_writable(*this, "fill_");
  backend().fill(ref(), value);
  storage()->bump_version();
  return *this;
}

// ---- factories ----

Tensor empty(const Shape& shape, const TensorOptions& options) {
  for (int64_t d : shape)
    KILN_CHECK(d >= 0, ShapeError, "empty: shape ", shape, " has a negative dimension");
  int64_t bytes = 0;
  KILN_CHECK(!__builtin_mul_overflow(shape.numel(), static_cast<int64_t>(dtype_size(options.dtype_)), &bytes),
             ShapeError, "empty: shape ", shape, " of ", options.dtype_, " is too large: its bytes pass 2^63 - 1");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(options.device_, static_cast<size_t>(bytes));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = options.dtype_;
  Tensor t(std::move(impl));
  if (options.requires_grad_) t.requires_grad_();
  return t;
}

Tensor full(const Shape& shape, double value, const TensorOptions& options) {
  Tensor t = empty(shape, TensorOptions(options.dtype_).device(options.device_));
  t.backend().fill(t.ref(), value);
  if (options.requires_grad_) t.requires_grad_();
  return t;
}

Tensor zeros(const Shape& shape, const TensorOptions& options) { return full(shape, 0.0, options); }
Tensor ones(const Shape& shape, const TensorOptions& options) { return full(shape, 1.0, options); }
Tensor scalar(double value, const TensorOptions& options) { return full({}, value, options); }

Tensor arange(double start, double end, double step, const TensorOptions& options) {
  KILN_CHECK(step != 0.0 && std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
             ValueError, "arange: start, end and step must be finite and step non-zero (got ", start,
             ", ", end, ", ", step, ")");
  auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  Tensor t = empty({std::max<int64_t>(n, 0)}, TensorOptions(options.dtype_).device(options.device_));
  t.backend().arange(t.ref(), start, step);
  if (options.requires_grad_) t.requires_grad_();
  return t;
}

Tensor empty_like(const Tensor& t) { return empty(t.shape(), TensorOptions(t.dtype()).device(t.device())); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), TensorOptions(t.dtype()).device(t.device())); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), TensorOptions(t.dtype()).device(t.device())); }

template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, TensorOptions options) {
  KILN_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), ShapeError, "from_vector: ",
             values.size(), " values for shape ", shape, " (", shape.numel(), " elements)");
  Tensor host = empty(shape, TensorOptions(dtype_of_v<T>));
  host.backend().write(host.storage()->data(), 0, values.data(), values.size() * sizeof(T));
  if (options.dtype_ != host.dtype()) host = dense_copy(host, options.dtype_);  // converted on the host
  Tensor t = host;
  if (!options.device_.is_cpu()) {
    t = empty(shape, TensorOptions(options.dtype_).device(options.device_));
    t.backend().write(t.storage()->data(), 0, host.storage()->data(),
                      static_cast<size_t>(host.numel()) * dtype_size(host.dtype()));
  }
  if (options.requires_grad_) t.requires_grad_();
  return t;
}
template Tensor from_vector<float>(const std::vector<float>&, const Shape&, TensorOptions);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&, TensorOptions);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, const Shape&, TensorOptions);
template Tensor from_vector<uint8_t>(const std::vector<uint8_t>&, const Shape&, TensorOptions);

TensorRef broadcast_ref(const Tensor& x, const Shape& shape) {
  TensorRef r = x.ref();
  size_t lead = shape.size() - r.shape.size();
  Strides strides(std::vector<int64_t>(shape.size(), 0));
  for (size_t i = 0; i < r.shape.size(); ++i)
    strides[lead + i] = r.shape[i] == 1 ? 0 : r.strides[i];
  r.shape = shape;
  r.strides = strides;
  return r;
}

Tensor make_view(const Tensor& base, Shape shape, Strides strides, int64_t offset) {
  for (int64_t d : shape)
    KILN_CHECK(d >= 0, ShapeError, "view: shape ", shape, " has a negative dimension");
  shape.numel();  // its sizes multiply within int64
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

}  // namespace kiln
