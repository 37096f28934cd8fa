// What the data-parallel tests share: the process group of the job they run in. Every rank of an
// mpirun job runs the same binary and the same cases in the same order (distributed_main.cpp).
#pragma once

#include <memory>

#include "kiln/core/process_group.h"

namespace kiln::test {

// The group made by main from --backend (mpi for cpu, nccl for cuda).
ProcessGroup& group();
const std::shared_ptr<ProcessGroup>& group_ptr();

}  // namespace kiln::test
