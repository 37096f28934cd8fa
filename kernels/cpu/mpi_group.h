// The MPI process group: collectives on CPU tensors over MPI_COMM_WORLD (a duplicate of it, so
// that a program's own MPI traffic cannot mix with kiln's). It is also how every data-parallel
// job starts: MPI gives each process its rank and its rank on its machine, and carries the
// NCCL group's unique id and the checks that ranks agree (kernels/cuda/nccl_group.h).
//
// Each collective is started nonblocking (MPI_Iallreduce, ...) and waited for with MPI_Test
// until it completes or the group's timeout passes; then the group is broken and the process
// ends with MPI_Abort at exit, which ends the job, rather than MPI_Finalize, which would wait.
#pragma once

#include <memory>

#include "kiln/core/process_group.h"

namespace kiln::cpu {

// MPI initialised once per process (MPI_Init_thread, funneled: only the thread that made the
// group calls MPI), finalised at exit. Throws DistributedError when MPI cannot start.
std::shared_ptr<ProcessGroup> mpi_world(const ProcessGroupOptions& options);

}  // namespace kiln::cpu
