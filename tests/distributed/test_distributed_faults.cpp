// Jobs with a misbehaving rank (fault_rank.cpp), each run under mpirun with 3 ranks: none may hang,
// each must end with a non-zero status and an error that names what went wrong.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>

#include "tests/temp_dir.h"

namespace {

struct Result {
  int code;
  double seconds;
  std::string output;  // stdout and stderr of every rank and of mpirun
};

Result run_job(const std::string& mode, const std::string& timeout_s) {
  kiln::test::TempDir dir;
  std::string log = dir.file("log");
  std::string cmd = std::string("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 KILN_DIST_TIMEOUT=") +
                    timeout_s + " timeout 120 " + KILN_MPIEXEC + " --oversubscribe -np 3 " + KILN_FAULT_RANK + " " +
                    mode + " >'" + log + "' 2>&1";
  auto start = std::chrono::steady_clock::now();
  int status = std::system(cmd.c_str());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, seconds, text.str()};
}

}  // namespace

TEST_CASE("a rank that hangs: the others time out, naming the collective and themselves, and the job ends") {
  Result r = run_job("hang", "2");
  INFO(r.output);
  CHECK(r.code != 0);
  CHECK(r.code != 124);  // not ended by `timeout`
  CHECK(r.seconds < 60);
  // ranks 0 and 1 both time out; the first to abort may end the other before it prints
  bool named = false;
  for (const char* rank : {"0", "1"})
    named = named || r.output.find(std::string("mpi all_reduce #2 (1000 f32 elements) on rank ") + rank +
                                   " of 3 did not complete within 2 s") != std::string::npos;
  CHECK(named);
}

TEST_CASE("a rank that is killed: the job ends at once, mpirun naming it") {
  Result r = run_job("die", "60");
  INFO(r.output);
  CHECK(r.code != 0);
  CHECK(r.seconds < 30);  // well before the 60 s timeout
  CHECK(r.output.find("signal 9") != std::string::npos);
}

TEST_CASE("ranks with different models: every rank refuses, naming the difference") {
  Result r = run_job("mismatch", "60");
  INFO(r.output);
  CHECK(r.code == 1);
  CHECK(r.output.find("rank 0 has weight [2, 4] f32, rank 1 has weight [3, 4] f32") != std::string::npos);
  CHECK(r.output.find("finished") == std::string::npos);
}
