// Capturing a stretch of work as one program the device replays: a CUDA graph.
//
// A training step queues some fifty kernels; launching each from the host costs a few
// microseconds of host time and leaves gaps between kernels. Captured once, the whole step is one
// launch: the device runs the recorded kernels back to back, and the host only says "again".
//
//     kiln::Graph graph = kiln::capture(device, [&] { ...queue the step's work... });
//     for (...) graph.replay();
//
// What holds while a capture is open on a device (CUDA only; the CPU and Vulkan backends refuse
// to open one, with BackendUnavailable):
// - Kernels are recorded, not run. Nothing may wait for the device or move data between it and
//   the host (Tensor::item(), to_vector(), a tensor made from host values): CaptureError says so.
// - Memory allocated inside comes from a pool of the graph's own: every replay writes the same
//   addresses, and no tensor outside the graph is handed them while the graph lives. A tensor
//   made inside and kept after (a gradient, the loss) holds what the latest replay wrote.
// - Memory allocated before the capture and freed inside it is kept until the graph is
//   destroyed: a replay may still read it.
// - Numbers the host hands a kernel are recorded with it. Those that must change from one replay
//   to the next (a scheduler's learning rate, Adam's bias corrections, where a dropout mask
//   starts in its Philox stream) are replay values: device memory the host refreshes before each
//   replay, which the kernel reads (Capture::replay_value below). Optimizers and random draws do
//   this themselves; code of one's own that needs it asks for a replay value.
// - Work on tensors of other devices (the CPU) runs at once, as always, and is not replayed.
// - Collectives of a process group on the device (NCCL) are recorded like kernels: a replay
//   all-reduces again, and the group's watchdog times each replay's collectives out as it does
//   those called eagerly (kernels/cuda/nccl_group.cpp).
//
// optim/captured_step.h builds a training step on this: static inputs, warm-up, one graph per
// input shape.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "kiln/core/device.h"

namespace kiln {

// The capture open on a backend (Backend::capture()).
class Capture {
 public:
  virtual ~Capture() = default;
  // Which capture this is: a number no other capture in the process had.
  virtual uint64_t id() const = 0;
  // `next` runs on the host before each replay but the first, in the order the calls were made,
  // before any replay value is refreshed: the host-side state a step advances (an optimizer's
  // step count) advances at every replay. The capture itself stands for the first replay's step.
  virtual void on_replay(std::function<void()> next) = 0;
  // `queued` runs on the host after each replay has been queued on the device's stream, the first
  // included: what a process group's watchdog uses to watch the collectives a graph holds.
  virtual void after_replay(std::function<void()> queued) = 0;
  // Device memory of `bytes` bytes (at most 256) that holds `first` at the first replay; before
  // each later replay, `next` writes into host memory of `bytes` bytes what it holds then. All of
  // a graph's replay values travel to the device in one copy before its launch.
  virtual const void* replay_value(const void* first, size_t bytes, std::function<void(void*)> next) = 0;

  template <class T>
  const T* replay_value(const T& first, std::function<T()> next) {
    return static_cast<const T*>(replay_value(&first, sizeof(T), [next = std::move(next)](void* out) {
      *static_cast<T*>(out) = next();
    }));
  }
};

// A captured program: replay() queues it once more on its device's stream, asynchronously, as a
// kernel launch would be.
class Graph {
 public:
  class Impl {
   public:
    virtual ~Impl() = default;
    virtual void replay() = 0;
    virtual size_t kernels() const = 0;
  };
  explicit Graph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
  void replay() { impl_->replay(); }
  size_t kernels() const { return impl_->kernels(); }  // the kernel launches it holds

 private:
  std::unique_ptr<Impl> impl_;
};

// Runs `work` with a capture open on `device` and returns the graph it recorded. The work is
// recorded, not done: replay the graph to do it. If `work` throws, the capture is abandoned and
// the exception goes on; the device is as if the capture had not been opened.
Graph capture(const Device& device, const std::function<void()>& work);

// The capture open on the backend of `device`, or null.
Capture* capturing(const Device& device);

}  // namespace kiln
