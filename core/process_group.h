// ProcessGroup: the ranks of a data-parallel run and the collectives between them, in kiln's own
// words. Two implementations sit with the backends they serve: NCCL for CUDA tensors
// (kernels/cuda/nccl_group.cpp) and MPI for CPU tensors (kernels/cpu/mpi_group.cpp). `mpirun`
// starts the processes, one per GPU; MPI tells each its rank and carries NCCL's unique id from
// rank 0 to the others. kiln has no rendezvous and no all-reduce of its own.
//
//   // mpirun -np 8 ./train
//   std::shared_ptr<ProcessGroup> group = init_process_group(DeviceType::cuda);
//   Device device = group->device();            // cuda:<local rank>
//   ...
//   group->all_reduce(grads, ReduceOp::mean);   // every rank now holds the mean over ranks
//
// Ordering. A collective is queued after the work already queued on its tensors' device and
// before the work queued after it, as a kernel is: on CUDA nothing waits on the host (the NCCL
// call is queued on kiln's stream, or for all_reduce_async on a stream of the group's that waits
// for kiln's, and kiln's stream waits for it in turn). On the CPU a collective returns when it is
// done.
//
// Every rank must call the same collectives, in the same order, with tensors of the same shape
// and dtype: that is the MPI and NCCL contract. A rank that does not come (it died, or hangs)
// would block the others forever; instead each collective gives up after the group's timeout,
// with a DistributedError naming the collective, its sequence number and the rank reporting it.
// A group whose collective failed or timed out is broken: it cannot be used again, and at exit it
// aborts the whole job (MPI_Abort) rather than wait for ranks that will not come.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/backend.h"
#include "kiln/core/device.h"
#include "kiln/core/tensor.h"

namespace kiln {

struct ProcessGroupOptions {
  // How long a collective may wait for the other ranks before the group gives up. The
  // environment variable KILN_DIST_TIMEOUT (seconds) overrides it.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
};

// A collective under way. wait() orders it before the work queued after the call: on CUDA it
// makes kiln's stream wait for it (the host does not block); on the CPU it blocks until done.
// The tensors of the collective stay alive until wait() or destruction.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  virtual std::string_view name() const = 0;  // "nccl", "mpi"
  // Where this group's tensors live: cuda:<local rank> for NCCL, cpu for MPI.
  virtual Device device() const = 0;
  int rank() const { return rank_; }              // 0 .. size() - 1
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // among the ranks of this machine
  int local_size() const { return local_size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // ---- collectives: t contiguous, on device(), of any dtype ----
  // In place, t = op over the ranks of t. op is sum, mean, max or min; mean (the sum divided by
  // size(), in t's dtype) takes floating-point tensors only.
  virtual std::unique_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp op) = 0;
  // Several tensors at once, each in place as above (each its own reduction; they may differ in
  // shape and dtype), finished by one Work. NCCL runs them as one group: one launch on the GPU,
  // which is how DistributedDataParallel reduces gradients where they lie instead of copying
  // them into one buffer. The default calls all_reduce_async for each.
  virtual std::unique_ptr<Work> all_reduce_async(std::span<const Tensor> tensors, ReduceOp op);
  // all_reduce_async(t, op)->wait(); a group may do it more directly (NCCL: on kiln's stream,
  // without the events that order a stream of its own).
  virtual void all_reduce(const Tensor& t, ReduceOp op);
  void all_reduce(const Tensor& t) { all_reduce(t, ReduceOp::sum); }
  // all_reduce_async(tensors, op)->wait(), as directly.
  virtual void all_reduce(std::span<const Tensor> tensors, ReduceOp op);
  // In place: every rank's t becomes root's.
  virtual void broadcast(const Tensor& t, int root = 0) = 0;
  // out: [size(), ...t's shape], out[r] = t of rank r.
  virtual void all_gather(const Tensor& t, const Tensor& out) = 0;
  // Returns on each rank once every rank has called it (and their earlier collectives are done).
  virtual void barrier() = 0;

  // ---- host values, for checks (through MPI, whatever the device) ----
  // Every rank's `value`, indexed by rank.
  virtual std::vector<std::string> all_gather_string(const std::string& value) = 0;
  // Throws the same DistributedError on every rank when the ranks' `value`s differ, naming `what`,
  // rank 0's value and the first rank that differs with its value: how a data-parallel run
  // refuses ranks built with different models or flags instead of hanging or averaging nonsense.
  void check_same(std::string_view what, const std::string& value);

 protected:
  ProcessGroup(int rank, int size, int local_rank, int local_size, std::chrono::milliseconds timeout);
  // The checks every group makes before it communicates, so that a bad call throws the same error
  // on every rank instead of leaving the others waiting. Errors name the group and the collective.
  // A tensor that passes and that the collective writes has its write counted (Tensor::version),
  // so that autograd refuses a graph that saved it before (autograd/node.h).
  // t defined, contiguous and on device():
  void check_tensor(std::string_view collective, const Tensor& t) const;
  // all_reduce: t as above, op one of sum, mean, max, min; mean only of floating-point tensors:
  void check_reduction(ReduceOp op, const Tensor& t) const;
  // broadcast: t as above, root a rank of this group:
  void check_broadcast(const Tensor& t, int root) const;
  // all_gather: t and out as above, out [size(), ...t's shape] of t's dtype:
  void check_all_gather(const Tensor& t, const Tensor& out) const;
  // "<what> did not complete within 5 s (KILN_DIST_TIMEOUT): ...", the error of a collective
  // that timed out, `what` naming it ("nccl all_reduce #2 (1000 f32 elements) on rank 0 of 2").
  std::string timed_out(const std::string& what) const;

 private:
  int rank_, size_, local_rank_, local_size_;
  std::chrono::milliseconds timeout_;
};

// Whether this process was started by an MPI launcher with more than one rank (mpirun's
// OMPI_COMM_WORLD_SIZE, or PMI_SIZE / PMIX_SIZE of other launchers): what makes mnist-train go
// data-parallel without a flag.
bool launched_with_several_ranks();

// The group of this process's job for tensors of `type`: MPI for the CPU, NCCL for CUDA (each
// rank on cuda:<local rank>; a machine with fewer GPUs than ranks is an error). Initialises MPI
// on the first call (a process not started by mpirun is a job of one rank). Vulkan has no group:
// an error says so. Throws BackendUnavailable when this build has no MPI (or no NCCL for CUDA).
// Defined by kernels/registry.cpp, beside backend_for.
std::shared_ptr<ProcessGroup> init_process_group(DeviceType type, const ProcessGroupOptions& options = {});

// The timeout in force: KILN_DIST_TIMEOUT (seconds, > 0) when set, else the options'. A value
// that is not a positive number is a ValueError naming the variable.
std::chrono::milliseconds effective_timeout(const ProcessGroupOptions& options);

}  // namespace kiln
