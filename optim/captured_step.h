// A training step captured once as a CUDA graph and replayed (core/capture.h says what capture
// means): the step's kernels, forward, backward and the optimizer's update, go to the GPU as one
// launch, so the host neither issues them one by one nor leaves gaps between them.
//
//     optim::CapturedStep step(optimizer, [&](const std::vector<Tensor>& in) {
//       optimizer.zero_grad();
//       Tensor loss = cross_entropy(model(in[0]), in[1]);
//       loss.backward();
//       optimizer.step();
//       return std::vector<Tensor>{loss.detach()};
//     });
//     for (const data::Batch& b : loader) {
//       Tensor loss = step({b.inputs, b.targets})[0];
//       scheduler.step();   // host-side, as always: the next replay takes the new learning rate
//     }
//
// What it does with each call:
// - The first `warmup` calls run the step as written, eagerly: the optimizer makes its state then
//   (a captured step cannot: Optimizer throws CaptureError), and anything else made on first use.
// - After them, the first call with inputs of a new shape (the last, short batch of an epoch)
//   copies them into static inputs of its own, captures the step on those, and replays it; later
//   calls with that shape copy their inputs into the static ones and replay. A graph per shape is
//   kept, with the memory its step uses.
// - Every call is one training step, eager or replayed, and computes what the eager step would:
//   the same kernels in the same order on the same values. Learning-rate schedules, Adam's bias
//   corrections and dropout's masks advance at every replay (core/capture.h: replay values).
//
// The step function must:
// - take its data from `inputs` only (a tensor it reaches otherwise is read at its address at
//   capture, which holds whatever is there at each replay);
// - change state that outlives the step in place (add_, copy_, fill_, the optimizer's update), not by
//   replacing a tensor (a running sum kept as `sum = sum + x` is updated once, at capture;
//   `sum.add_(x)` at every replay);
// - not read the device (item(), to_vector()): CaptureError says so.
// The tensors it returns are the graph's: each replay overwrites them; clone() what must outlast
// the next call, or keep() them on the device (below), which copies nothing outside the graph.
// After a replay, the parameters' grad() are those that replay computed. A graph updates the
// parameters where they were at its capture: one replaced since (Module::to, load_state_dict onto
// new storage) makes the replay throw CaptureError; build a new CapturedStep.
//
// Only devices that capture graphs (CUDA) take a CapturedStep: the first call with inputs on
// another throws BackendUnavailable. Eager mode is the default everywhere else in kiln, and what
// tests compare a captured step with.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "kiln/core/capture.h"
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

class CapturedStep {
 public:
  using Step = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

  CapturedStep(Optimizer& optimizer, Step step, int warmup = 1);

  // One training step on `inputs` (their shapes pick the graph); returns what the step returned.
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs);

  size_t graphs() const { return graphs_.size(); }  // captured so far, one per input shape

  // Keeps the outputs of the last `steps` calls on the device: each call, eager or replayed,
  // appends what its step returned to a ring of its own (Backend::ring_push, in the graph when it
  // replays), so that a loop that looks at every step's loss, a window of steps at a time, neither
  // clones each loss (a launch outside the graph, a step) nor reads it at once:
  //
  //     step.keep(10);
  //     for (...) { step({x, y}); if (++n % 10 == 0) print(step.recent(0, 10).to_vector<float>()); }
  //
  // Call it before the first step; every call's output i must then have output i's dtype and
  // number of elements at the first. What it saves mnist-train, measured: kernels/README.md (A
  // training step's kernels).
  CapturedStep& keep(int64_t steps);
  // Output `output` of the last `count` calls, oldest first, stacked along a new first dimension,
  // in a tensor of its own; count at most keep()'s steps and the calls made.
  Tensor recent(size_t output, int64_t count) const;
  int64_t calls() const { return calls_; }  // steps taken, eager or replayed

  // The graph's own inputs for inputs like `like` (their dtypes and shapes), once a graph for those
  // exists (else none). The next call's inputs written straight into them (DataLoader::batch's
  // `into`) and passed back are not copied: a step then queues nothing but its replay.
  std::vector<Tensor> inputs_like(const std::vector<Tensor>& like) const;

 private:
  struct Captured {
    std::unique_ptr<Graph> graph;
    std::vector<Tensor> inputs, outputs;  // the graph's static inputs and what its step returned
    std::vector<Tensor> grads;            // the parameters' gradients the graph writes
    std::vector<const Storage*> params;   // the storage of each parameter the graph updates
  };
  using Signature = std::vector<int64_t>;  // each input's dtype, rank and sizes

  // A kept output's ring: [keep_, numel] of its dtype, the row the next call writes (i32, on the
  // device, moved on there), and the output's shape.
  struct Ring {
    Tensor rows, next;
    Shape shape;
  };

  Captured capture(const std::vector<Tensor>& inputs);
  static Signature signature_of(const std::vector<Tensor>& inputs);
  // Appends a call's outputs to the rings (made at the first call's, outside any capture).
  void push(const std::vector<Tensor>& outputs);

  Optimizer& optimizer_;
  Step step_;
  int warmup_;
  int eager_ = 0;
  std::map<Signature, Captured> graphs_;
  int64_t keep_ = 0, calls_ = 0;
  std::vector<Ring> rings_;
};

}  // namespace kiln::optim
