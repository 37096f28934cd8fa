// DistributedDataParallel: the same model trained by every rank of a job on its own share of each
// batch, its gradients averaged over the ranks after every backward, as PyTorch's
// torch.nn.parallel.DistributedDataParallel.
//
//   // mpirun -np 8 ./train         (one process per GPU)
//   auto group = init_process_group(DeviceType::cuda);
//   auto model = std::make_shared<Net>();
//   model->to(group->device());
//   auto ddp = std::make_shared<nn::DistributedDataParallel>(model, group);
//   optim::SGD opt(ddp->parameters(), optim::SGDOptions(0.01));
//   for (const data::Batch& b : loader) {       // a loader sharded by rank (datasets/loader.h)
//     opt.zero_grad();
//     Tensor loss = cross_entropy(ddp->forward(b.inputs), b.targets);
//     loss.backward();                         // gradients averaged over ranks when it returns
//     opt.step();                              // every rank takes the same step
//   }
//
// At construction the ranks check that they hold the same parameters (names, shapes, dtypes, in
// the same order) and the same bucket layout, with an error naming the first difference; then
// rank 0's parameters and buffers are broadcast to all, so every rank starts from the same model.
//
// During backward the autograd engine calls a hook as soon as a parameter's gradient is final
// (Tensor::register_post_accumulate_grad_hook). Parameters sit in buckets in reverse registration
// order (roughly the order backward finishes them), a bucket closed once it holds bucket_cap_mb;
// when a bucket's gradients are all final they are averaged over the ranks where they lie
// (all_reduce mean, in place, as one NCCL group: one launch), on the group's stream, while
// backward goes on computing the gradients of earlier layers. Nothing is copied: PyTorch copies
// each gradient into a flat bucket buffer first, and for a small model the copies cost more than
// the wire (mnist-train's CNN at batch 64 on 2 x H200: 0.481 ms a step with copies, 0.451
// without). Buckets are launched strictly in bucket order, one collective each, so every rank
// issues the same collectives in the same order, whatever the order its gradients came in. The last
// bucket has nothing left to overlap and goes on kiln's stream itself. At the end of backward
// (autograd::queue_callback) kiln's stream waits for the others: on CUDA nothing of this blocks the
// host.
//
// The reductions read and write the gradients while backward goes on. A gradient hook that must
// change gradients before they are averaged (clipping, say) is registered before the model is
// wrapped, so that it runs first; one registered after runs once its gradient is handed over.
//
// The result equals one process training on the union of the ranks' batches (the global batch)
// up to the order of float sums, provided that the loss is a mean over the batch and that every
// rank's batch has the same size (DataLoader's shard_tail pad or drop gives that).
//
// Gradient accumulation: backward passes inside a no_sync() guard leave their gradients on each
// rank, summed as usual; the first backward after it averages the sum.
//
// Parameters that take no part in a forward: without find_unused_parameters that is an error at
// the end of its backward (naming them). With it, every backward all-reduces a usage mask (one
// small collective and a host read): a parameter no rank used keeps no gradient (as in one
// process), one used by some ranks gets their average with zeros from the others.
#pragma once

#include <memory>

#include "kiln/core/process_group.h"
#include "kiln/layers/module.h"

namespace kiln::nn {

struct DistributedDataParallelOptions {
  KILN_ARG(double, bucket_cap_mb) = 25;  // PyTorch's default
  // Before every forward in training mode, rank 0's buffers (BatchNorm's running statistics) are
  // broadcast to all ranks, as PyTorch does.
  KILN_ARG(bool, broadcast_buffers) = true;
  KILN_ARG(bool, find_unused_parameters) = false;
};

class DistributedDataParallel : public Module {
 public:
  // `module` already on group->device(); it is registered as the child "module", so this
  // module's state_dict() keys read "module.fc1.weight" as PyTorch's do (save module().state_dict()
  // for a checkpoint that a single process loads).
  DistributedDataParallel(std::shared_ptr<Module> module, std::shared_ptr<ProcessGroup> group,
                          DistributedDataParallelOptions options = {});
  ~DistributedDataParallel() override;

  Tensor forward(const Tensor& x) override;
  Module& module() { return *module_; }
  ProcessGroup& process_group() { return *group_; }
  std::string extra_repr() const override;

  // While a NoSync lives, backward() averages nothing (gradient accumulation).
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  // The buckets' parameter counts and sizes, in launch order (for tests and the curious).
  struct BucketInfo {
    size_t parameters;
    int64_t bytes;
  };
  std::vector<BucketInfo> buckets() const;

 private:
  struct Reducer;
  std::shared_ptr<Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  DistributedDataParallelOptions options_;
  std::shared_ptr<Reducer> reducer_;
};

}  // namespace kiln::nn
