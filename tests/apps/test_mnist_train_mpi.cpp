// mnist-train data-parallel on the CPU: 2 processes under mpirun (MPI carries the gradients),
// against one process on the same global batches; rank-0-only output and files; checkpoints that
// resume across process counts; ranks whose settings differ. Needs the MNIST files (every case
// skips without them, so CTest reports the test skipped; under CI=true it fails).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/apps/app_test.h"
#include "tests/apps/run_app.h"

namespace fs = std::filesystem;
using kiln::test::Result;
using kiln::test::TempDir;

namespace {

bool have_data() { return kiln::test::have_mnist("train-images-idx3-ubyte"); }

// `ranks` 0: mnist-train alone; else under mpirun with that many processes. `args` may hold
// " : " followed by a second program's arguments (mpirun's MPMD form, one process each).
Result run(int ranks, const std::string& args) {
  const std::string train = std::string("'") + KILN_MNIST_TRAIN + "' --data '" + kiln::test::mnist_dir() + "' ";
  std::string cmd = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 KILN_DIST_TIMEOUT=120 timeout 300 ";
  if (ranks == 0) {
    cmd += train + args;
  } else {
    std::string a = args, b;
    if (size_t colon = args.find(" : "); colon != std::string::npos) {
      a = args.substr(0, colon);
      b = args.substr(colon + 3);
    }
    cmd += std::string(KILN_MPIEXEC) + " --oversubscribe -np " + std::to_string(ranks) + " " + train + a;
    if (!b.empty()) cmd += " : -np 1 " + train + b;
  }
  return kiln::test::run_shell(cmd);  // the output of every rank together
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The number after "key": in the last line of a metrics file holding "type":"epoch".
double last_epoch_metric(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (line.find("\"type\":\"epoch\"") != std::string::npos) last = line;
  size_t at = last.find("\"" + key + "\":");
  REQUIRE(at != std::string::npos);
  return std::stod(last.substr(at + key.size() + 3));
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// An MLP with plain SGD (no dropout: the ranks' random streams differ), on 1280 images: 2
// processes of batch 32 take the same global batches of 64 as one process of batch 64.
const std::string kBase = "--model mlp --optimizer sgd --scheduler none --limit-train 1280 --limit-test 500 -q ";
const std::string kRun = kBase + "--lr 0.1 --device cpu ";

}  // namespace

TEST_CASE("mnist-train under mpirun -np 2 trains as one process on the global batch, rank 0 alone writing") {
  if (!have_data()) return kiln::test::skip_without_mnist();
  TempDir dir;
  Result one = run(0, kRun + "--epochs 2 --batch-size 64 --metrics-out '" + dir.file("one.jsonl") + "'");
  REQUIRE_MESSAGE(one.code == 0, one.out);
  Result two = run(2, kRun + "--epochs 2 --batch-size 32 --metrics-out '" + dir.file("two.jsonl") + "' --save '" +
                          dir.file("two.safetensors") + "' --plot '" + dir.file("two.png") + "'");
  REQUIRE_MESSAGE(two.code == 0, two.out);
  INFO(two.out);
  // f32 sums in another order: the test loss agrees to well under a thousandth
  for (const char* key : {"train_loss", "test_loss", "test_accuracy"}) {
    double a = last_epoch_metric(dir.file("one.jsonl"), key), b = last_epoch_metric(dir.file("two.jsonl"), key);
    CAPTURE(key);
    CHECK(std::abs(a - b) <= 1e-4 * std::max(1.0, std::abs(a)));
  }
  CHECK(count(two.out, "epoch  2") == 1);  // printed by rank 0 only
  CHECK(count(two.out, "best test accuracy") == 1);
  size_t epochs = 0;
  for (const std::string& line : lines_of(dir.file("two.jsonl"))) epochs += line.find("\"epoch\",") != std::string::npos;
  CHECK(epochs == 2);  // one writer
  CHECK(fs::exists(dir.file("two.safetensors")));
  CHECK(fs::exists(dir.file("two.png")));
}

TEST_CASE("under mpirun, rank 0 alone logs the program's lines, and kiln's warnings come from every rank") {
  if (!have_data()) return kiln::test::skip_without_mnist();
  // not quiet (kRun has -q), and a KILN_NUM_THREADS that both ranks inherit from mpirun
  Result r = kiln::test::run_shell(
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 KILN_NUM_THREADS=two timeout 300 " +
      std::string(KILN_MPIEXEC) + " --oversubscribe -np 2 '" + KILN_MNIST_TRAIN + "' --data '" +
      kiln::test::mnist_dir() + "' --model mlp --limit-train 1280 --limit-test 500 --device cpu --epochs 1");
  REQUIRE_MESSAGE(r.code == 0, r.out);
  CHECK_MESSAGE(count(r.out, "\ndata: ") == 1, r.out);
  CHECK_MESSAGE(count(r.out, "kiln: warning: KILN_NUM_THREADS='two'") == 2, r.out);
}

TEST_CASE("mnist-train checkpoints resume across process counts") {
  if (!have_data()) return kiln::test::skip_without_mnist();
  TempDir dir;
  // 2 processes for epoch 1, then 1 process for epoch 2: as 1 process for both
  REQUIRE(run(2, kRun + "--epochs 1 --batch-size 32 --save '" + dir.file("a") + "'").code == 0);
  Result one = run(0, kRun + "--epochs 2 --batch-size 64 --resume '" + dir.file("a") + "' --metrics-out '" +
                          dir.file("a.jsonl") + "'");
  REQUIRE_MESSAGE(one.code == 0, one.out);
  REQUIRE(run(0, kRun + "--epochs 2 --batch-size 64 --metrics-out '" + dir.file("straight.jsonl") + "'").code == 0);
  CHECK(std::abs(last_epoch_metric(dir.file("a.jsonl"), "test_loss") -
                 last_epoch_metric(dir.file("straight.jsonl"), "test_loss")) <= 1e-4);
  // and the reverse: 1 process for epoch 1, then 2
  REQUIRE(run(0, kRun + "--epochs 1 --batch-size 64 --save '" + dir.file("b") + "'").code == 0);
  Result two = run(2, kRun + "--epochs 2 --batch-size 32 --resume '" + dir.file("b") + "' --metrics-out '" +
                          dir.file("b.jsonl") + "'");
  REQUIRE_MESSAGE(two.code == 0, two.out);
  CHECK(std::abs(last_epoch_metric(dir.file("b.jsonl"), "test_loss") -
                 last_epoch_metric(dir.file("straight.jsonl"), "test_loss")) <= 1e-4);
}

TEST_CASE("mnist-train refuses ranks whose settings differ, and data-parallel runs it cannot make") {
  if (!have_data()) return kiln::test::skip_without_mnist();
  Result r = run(1, kBase + "--device cpu --epochs 1 --lr 0.1 : " + kBase + "--device cpu --epochs 1 --lr 0.2");
  CHECK(r.code == 1);
  CHECK_MESSAGE(r.out.find("the ranks disagree on the settings") != std::string::npos, r.out);
  CHECK(r.out.find("\"lr\":0.2") != std::string::npos);
  // the arithmetic too: one rank in bf16 and one in f32 would average different gradients
  Result precision = run(1, kBase + "--device cpu --epochs 1 --precision bf16 : " + kBase + "--device cpu --epochs 1");
  CHECK(precision.code == 1);
  CHECK_MESSAGE(precision.out.find("the ranks disagree on the settings") != std::string::npos, precision.out);
  CHECK_MESSAGE(precision.out.find("precision bf16") != std::string::npos, precision.out);
  Result gpu = run(2, kBase + "--lr 0.1 --epochs 1 --device cuda:1");
  CHECK(gpu.code != 0);
  CHECK_MESSAGE(gpu.out.find("names one GPU") != std::string::npos, gpu.out);
}

TEST_CASE("a diverging data-parallel run stops every rank at the same update, each naming why, nothing saved") {
  if (!have_data()) return kiln::test::skip_without_mnist();
  TempDir dir;
  Result r = run(2, kBase + "--device cpu --epochs 2 --lr 1e20 --batch-size 32 --log-interval 5 --save '" +
                        dir.file("ckpt") + "'");
  CHECK_MESSAGE(r.code == 1, r.out);
  // every rank stops on the vote, not on a collective that times out because another rank left
  CHECK_MESSAGE(count(r.out, "mnist-train: error:") == 2, r.out);
  CHECK_MESSAGE(count(r.out, "training loss is ") == 2, r.out);
  CHECK_MESSAGE(r.out.find(" at epoch 1, batch ") != std::string::npos, r.out);
  CHECK(r.out.find("did not complete") == std::string::npos);
  CHECK(!fs::exists(dir.file("ckpt")));
}
