// The benches' JSON, read back as JSON: what it records of the build first (program, kiln's version,
// git revision), then the figures, numbers or null. kernel-bench, which needs a GPU, is read the
// same way by scripts/device-run.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <string>

#include "kiln/kiln.h"
#include "tests/apps/run_app.h"
#include "tests/temp_dir.h"

using kiln::test::Result;
using kiln::test::TempDir;

namespace {

void check_build_info(const nlohmann::json& j, const char* program) {
  CHECK(j["program"] == program);
  CHECK(j["kiln"] == KILN_VERSION);
  REQUIRE(j.contains("revision"));  // a string, or null outside a git checkout
  CHECK((j["revision"].is_string() || j["revision"].is_null()));
}

}  // namespace

TEST_CASE("cpu-bench --json: the build, the thread count, and a finite time for every figure") {
  TempDir dir;
  Result r = kiln::test::run_shell("'" KILN_CPU_BENCH "' --quick --threads 1 --json '" + dir.file("cpu.json") + "'");
  REQUIRE_MESSAGE(r.code == 0, r.out);
  std::ifstream file(dir.file("cpu.json"));
  const nlohmann::json j = nlohmann::json::parse(file);
  check_build_info(j, "cpu-bench");
  CHECK(j["threads"] == 1);
  REQUIRE(j["results"].size() == 9);  // 3 matmuls, 2 convs x 3 passes
  for (const nlohmann::json& figure : j["results"]) {
    CAPTURE(figure.dump());
    CHECK(figure["name"].is_string());
    CHECK(figure["ms"].get<double>() > 0);
    CHECK(std::isfinite(figure["gflops"].get<double>()));
  }
}

#ifdef KILN_DIST_BENCH
TEST_CASE("dist-bench allreduce --json: a JSON line a size and implementation, appended") {
  TempDir dir;
  const std::string run = std::string(KILN_MPIEXEC) + " --oversubscribe --allow-run-as-root -np 2 '" KILN_DIST_BENCH
                          "' allreduce --device cpu --max-bytes 16K --iters 3 --warmup 1 --json '" +
                          dir.file("dist.jsonl") + "'";
  for (int i = 0; i < 2; ++i) {
    Result r = kiln::test::run_shell(run);
    REQUIRE_MESSAGE(r.code == 0, r.out);
  }
  std::ifstream file(dir.file("dist.jsonl"));
  int lines = 0;
  for (std::string line; std::getline(file, line); ++lines) {
    CAPTURE(line);
    const nlohmann::json j = nlohmann::json::parse(line);
    check_build_info(j, "dist-bench");
    CHECK(j["bench"] == "allreduce");
    CHECK((j["impl"] == "kiln" || j["impl"] == "mpi"));
    CHECK(j["ranks"] == 2);
    CHECK(j["us"].get<double>() > 0);
  }
  CHECK(lines == 2 * 2 * 2);  // two runs appended, each of 2 implementations x 2 sizes (4K, 16K)
}
#endif
