#include "kiln/optim/captured_step.h"

#include <cstdint>
#include <limits>

#include "kiln/autograd/node.h"
#include "kiln/autograd/ops.h"
#include "kiln/core/backend.h"

namespace kiln::optim {

CapturedStep::CapturedStep(Optimizer& optimizer, Step step, int warmup)
    : optimizer_(optimizer), step_(std::move(step)), warmup_(warmup) {
  KILN_CHECK(static_cast<bool>(step_), ValueError, "CapturedStep: the step function is empty");
  KILN_CHECK(warmup >= 1, ValueError, "CapturedStep: warmup must be at least 1 (the optimizer makes its state "
             "in an eager step), got ", warmup);
}

CapturedStep::Signature CapturedStep::signature_of(const std::vector<Tensor>& inputs) {
  KILN_CHECK(!inputs.empty(), ValueError, "CapturedStep: a step takes at least one input tensor");
  const Device device = inputs[0].device();
  Signature signature;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    KILN_CHECK(t.defined(), ValueError, "CapturedStep: input ", i, " is an undefined tensor");
    KILN_CHECK(t.device() == device, DeviceError, "CapturedStep: input ", i, " is on ", t.device(), " but input 0 on ",
               device, "; a captured step runs on one device");
    signature.push_back(static_cast<int64_t>(t.dtype()));
    signature.push_back(t.dim());
    for (int64_t a = 0; a < t.dim(); ++a) signature.push_back(t.size(a));
  }
  return signature;
}

std::vector<Tensor> CapturedStep::inputs_like(const std::vector<Tensor>& like) const {
  auto it = graphs_.find(signature_of(like));
  return it == graphs_.end() ? std::vector<Tensor>() : it->second.inputs;
}

std::vector<Tensor> CapturedStep::operator()(const std::vector<Tensor>& inputs) {
  const Signature signature = signature_of(inputs);
  const Device device = inputs[0].device();
  KILN_CHECK(inputs[0].backend().can_capture(), BackendUnavailable, "CapturedStep: the inputs are on ", device,
             ", whose backend (", inputs[0].backend().name(), ") does not capture graphs; run the step directly "
             "there (only CUDA devices capture)");
  if (eager_ < warmup_) {
    std::vector<Tensor> outputs = step_(inputs);
    push(outputs);
    ++eager_;
    ++calls_;
    return outputs;
  }
  auto it = graphs_.find(signature);
  if (it == graphs_.end()) {
    it = graphs_.emplace(signature, capture(inputs)).first;
  } else {
    Captured& c = it->second;
    const std::vector<Tensor>& params = optimizer_.parameters();
    for (size_t i = 0; i < params.size(); ++i)
      KILN_CHECK(params[i].storage().get() == c.params[i], CaptureError, "CapturedStep: parameter ", i, " (",
                 params[i].shape(), ") is no longer where the step was captured (moved or loaded onto new "
                 "storage); the graph would update the old one: build a new CapturedStep");
    // the new inputs into the graph's, all in one copy_many (one launch on CUDA), but for those
    // that are the graph's own already (written in place: inputs_like)
    std::vector<TensorRef> from, to;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const TensorRef src = inputs[i].ref(), dst = c.inputs[i].ref();
      if (src.buffer == dst.buffer && src.offset == dst.offset && src.strides == dst.strides) continue;
      from.push_back(src);
      to.push_back(dst);
    }
    if (!from.empty()) inputs[0].backend().copy_many(from, to);
    for (Tensor& t : c.inputs) t.storage()->bump_version();
    c.graph->replay();
  }
  // Another shape's graph may have replayed since: the gradients are this graph's now.
  const std::vector<Tensor>& params = optimizer_.parameters();
  for (size_t i = 0; i < params.size(); ++i) params[i].set_grad(it->second.grads[i]);
  ++calls_;
  return it->second.outputs;
}

CapturedStep::Captured CapturedStep::capture(const std::vector<Tensor>& inputs) {
  Captured c;
  {
    NoGradGuard no_grad;
    for (const Tensor& t : inputs) c.inputs.push_back(t.detach().clone());  // made before the capture
  }
  c.graph = std::make_unique<Graph>(kiln::capture(inputs[0].device(), [&] {
    c.outputs = step_(c.inputs);
    push(c.outputs);
  }));
  for (const Tensor& p : optimizer_.parameters()) {
    c.grads.push_back(p.grad());
    c.params.push_back(p.storage().get());
  }
  c.graph->replay();  // the capture recorded the step; this runs it
  return c;
}

CapturedStep& CapturedStep::keep(int64_t steps) {
  KILN_CHECK(calls_ == 0, ValueError, "CapturedStep::keep: call it before the first step (", calls_,
             " taken): the rings are made at the first");
  KILN_CHECK(steps >= 0 && steps <= std::numeric_limits<int32_t>::max(), ValueError,
             "CapturedStep::keep: steps must be in [0, 2^31), got ", steps);
  keep_ = steps;
  return *this;
}

void CapturedStep::push(const std::vector<Tensor>& outputs) {
  if (keep_ == 0) return;
  if (rings_.empty() && !outputs.empty()) {
    KILN_CHECK(!capturing(outputs[0].device()), CaptureError,
               "CapturedStep: the kept outputs' rings are made at the first call, which must be eager");
    for (const Tensor& out : outputs) {
      const Tensor rows = empty({keep_, out.numel()}, TensorOptions(out.dtype()).device(out.device()));
      rings_.push_back({rows, zeros({1}, TensorOptions(DType::i32).device(out.device())), out.shape()});
    }
  }
  KILN_CHECK(outputs.size() == rings_.size(), ValueError, "CapturedStep: this step returned ", outputs.size(),
             " tensors, the first ", rings_.size(), "; keep() needs as many at every call");
  // every output checked before any is pushed, so that the rings stay in step
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    const Ring& r = rings_[i];
    KILN_CHECK(out.dtype() == r.rows.dtype() && out.numel() == r.shape.numel() && out.device() == r.rows.device(),
               ValueError, "CapturedStep: output ", i, " is ", out.dtype(), " ", out.shape(), " on ", out.device(),
               ", the first call's was ", r.rows.dtype(), " ", r.shape, " on ", r.rows.device(),
               "; keep() needs each output's dtype, size and device at every call");
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor src = outputs[i].detach().contiguous();
    src.backend().ring_push(src.ref(), rings_[i].rows.ref(), rings_[i].next.ref());
    rings_[i].rows.storage()->bump_version();
  }
}

Tensor CapturedStep::recent(size_t output, int64_t count) const {
  KILN_CHECK(output < rings_.size(), ValueError, "CapturedStep::recent: output ", output, " is not kept (",
             rings_.size(), " kept", keep_ == 0 ? ": keep() was not called" : "", ")");
  KILN_CHECK(count >= 0 && count <= keep_ && count <= calls_, ValueError, "CapturedStep::recent: ", count,
             " steps asked, but ", keep_, " are kept and ", calls_, " taken");
  const Ring& r = rings_[output];
  const int64_t first = (calls_ - count) % keep_;  // the oldest one's row
  Tensor rows = first + count <= keep_
                    ? r.rows.slice(0, first, first + count).clone()
                    : concat({r.rows.slice(0, first, keep_), r.rows.slice(0, 0, first + count - keep_)});
  std::vector<int64_t> shape{count};
  for (size_t a = 0; a < r.shape.size(); ++a) shape.push_back(r.shape[a]);
  return rows.reshape(Shape(shape));
}

}  // namespace kiln::optim
