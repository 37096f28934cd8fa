// A data-parallel job in which one rank misbehaves, for test_distributed_faults: run as
//
//   mpirun --oversubscribe -np 3 fault_rank MODE [cpu|cuda]
//
// on the CPU through MPI (the default), or on CUDA through NCCL, one rank per GPU (the device's
// scripts/device-run dist stage), where a collective that times out ends the rank from the
// group's watchdog, which prints "kiln: error: nccl all_reduce #2 ...".
//
// hang      the last rank sleeps instead of joining an all_reduce: the others give up after
//           KILN_DIST_TIMEOUT with an error naming the collective and their rank, and the job ends
// hang-graph (cuda only) the same with the all_reduce captured in a CUDA graph: every rank replays
//           it once together, then the last sleeps while the others replay it again; their
//           watchdogs name the graph, the replay and the collective captured in it
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
  const std::string device = argc > 2 ? argv[2] : "cpu";
  if ((mode != "hang" && mode != "hang-graph" && mode != "die" && mode != "mismatch") ||
      (device != "cpu" && device != "cuda") || (mode == "hang-graph" && device != "cuda")) {
    std::cerr << "usage: fault_rank hang|die|mismatch [cpu|cuda], or fault_rank hang-graph cuda\n";
    return 2;
  }
  try {
    std::shared_ptr<ProcessGroup> group = init_process_group(device == "cuda" ? DeviceType::cuda : DeviceType::cpu);
    const bool last = group->rank() == group->size() - 1;
    Tensor t = ones({1000}, group->device());
    group->all_reduce(t);
    (void)t.to_vector<float>();  // every rank is here
    if (mode == "hang" && last) sleep(3600);
    if (mode == "die" && last) std::raise(SIGKILL);
    if (mode == "hang-graph") {
      Graph graph = capture(group->device(), [&] { group->all_reduce(t); });
      graph.replay();
      (void)t.to_vector<float>();  // every rank replayed once
      if (last) sleep(3600);
      graph.replay();
      (void)t.to_vector<float>();  // the others wait here, and their watchdogs with them
    }
    if (mode == "mismatch") {
      auto net = std::make_shared<nn::Linear>(4, group->rank() == 1 ? 3 : 2);
      net->to(group->device());
      nn::DistributedDataParallel ddp(net, group);
    }
    group->all_reduce(t);
    (void)t.to_vector<float>();  // on CUDA the host waits here, and the watchdog with it
    std::cout << "fault_rank: rank " << group->rank() << " finished\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "fault_rank: error: " << e.what() << std::endl;
    return 1;
  }
}
