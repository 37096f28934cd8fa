// The NCCL process group: collectives on CUDA tensors, one communicator per process and GPU.
//
// Each rank works on cuda:<local rank>. Rank 0 draws NCCL's unique id and sends it to the others
// through `bootstrap`, the MPI group of the same job, which also serves barriers and the checks
// that ranks agree. all_reduce_async runs on a stream of the group's own that first waits for
// kiln's stream (so it sees every kernel queued before it); Work::wait() makes kiln's stream wait
// for it in turn. Nothing blocks the host, so backward keeps queueing kernels while gradients
// travel, and communication overlaps computation on the GPU. The blocking collectives (all_reduce,
// broadcast, all_gather) run on kiln's stream itself, where they overlap nothing anyway and the
// events between the streams would only add to their latency.
//
// A watchdog thread follows every collective in flight. One that has not completed within the
// group's timeout, or an asynchronous NCCL error, ends the process: it prints what failed (the
// collective, its sequence number, this rank) and exits with status 1 at once, upon which mpirun
// ends the other ranks. A host thread blocked on the GPU could not be woken otherwise, and one
// woken by aborting the communicator would go on with data the collective never delivered.
//
// Collectives queued while kiln's stream is captured (core/capture.h) are recorded into the graph
// with the kernels around them, the group's stream included as a branch of the graph; they run
// at each replay. The watchdog then follows each replay of such a graph as one: its timeout names
// the graph, the replay and the collectives captured in it.
#pragma once

#include <memory>

#include "kiln/core/process_group.h"

namespace kiln::cuda {

std::shared_ptr<ProcessGroup> nccl_group(std::shared_ptr<ProcessGroup> bootstrap, const ProcessGroupOptions& options);

}  // namespace kiln::cuda
