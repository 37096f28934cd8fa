// A data-parallel job in which one rank misbehaves, for test_distributed_faults: run as
//
//   mpirun --oversubscribe -np 3 fault_rank MODE
//
// hang      the last rank sleeps instead of joining an all_reduce: the others give up after
//           KILN_DIST_TIMEOUT with an error naming the collective and their rank, and the job ends
// die       the last rank is killed (SIGKILL) before an all_reduce: mpirun ends the others
// mismatch  rank 1 holds a different model: every rank refuses it at DistributedDataParallel's
//           construction, naming the difference
// Every rank prints "fault_rank: error: ..." and exits with 1 when kiln throws.
#include <unistd.h>

#include <csignal>
#include <iostream>
#include <string>

#include "kiln/kiln.h"

int main(int argc, char** argv) {
  using namespace kiln;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "hang" && mode != "die" && mode != "mismatch") {
    std::cerr << "usage: fault_rank hang|die|mismatch\n";
    return 2;
  }
  try {
    std::shared_ptr<ProcessGroup> group = init_process_group(DeviceType::cpu);
    const bool last = group->rank() == group->size() - 1;
    Tensor t = ones({1000});
    group->all_reduce(t);  // every rank is here
    if (mode == "hang" && last) sleep(3600);
    if (mode == "die" && last) std::raise(SIGKILL);
    if (mode == "mismatch") {
      auto net = std::make_shared<nn::Linear>(4, group->rank() == 1 ? 3 : 2);
      nn::DistributedDataParallel ddp(net, group);
    }
    group->all_reduce(t);
    std::cout << "fault_rank: rank " << group->rank() << " finished\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "fault_rank: error: " << e.what() << std::endl;
    return 1;
  }
}
