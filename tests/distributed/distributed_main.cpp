// The main of test_distributed, run as every rank of an mpirun job:
//
//   mpirun --oversubscribe -np 3 build/release/tests/distributed/test_distributed --backend=cpu
//   mpirun -np 1 build/release/tests/distributed/test_distributed --backend=cuda
//
// It makes the job's process group for --backend (cpu: MPI; cuda: NCCL, each rank on
// cuda:<local rank>), then runs the doctest cases; ranks other than 0 print only failures. Without
// a CUDA device, --backend=cuda exits with 77, which CTest reports as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/backend.h"
#include "tests/distributed/distributed.h"

namespace kiln::test {

namespace {
std::shared_ptr<ProcessGroup> g_group;
}

ProcessGroup& group() { return *g_group; }
const std::shared_ptr<ProcessGroup>& group_ptr() { return g_group; }

}  // namespace kiln::test

int main(int argc, char** argv) {
  std::string backend = "cpu";
  std::vector<const char*> args;
  for (int i = 0; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (i > 0 && arg.starts_with("--backend=")) backend = arg.substr(10);
    else args.push_back(argv[i]);
  }
  if (backend != "cpu" && backend != "cuda") {
    std::cerr << "--backend=" << backend << ": expected cpu or cuda\n";
    return 2;
  }
  try {
    if (backend == "cuda") kiln::backend_for(kiln::Device::cuda(0));  // throws without a GPU
  } catch (const kiln::Error& e) {
    std::cout << "skipped cuda: " << e.what() << "\n";
    return 77;
  }
  kiln::test::g_group = kiln::init_process_group(backend == "cuda" ? kiln::DeviceType::cuda : kiln::DeviceType::cpu);
  doctest::Context context(static_cast<int>(args.size()), args.data());
  if (kiln::test::g_group->rank() != 0) context.setOption("minimal", true);
  int failed = context.run();
  kiln::test::g_group.reset();
  return failed;
}
