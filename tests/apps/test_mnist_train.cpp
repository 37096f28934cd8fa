// mnist-train end to end: exit codes, a real (small) training run, resume equivalence, Ctrl-C,
// and checkpoints that are malformed. Runs the built binary; the cases that train need the MNIST
// files (the doctest suites needs-mnist*: skipped without them, failed under CI=true, where
// scripts/setup fetches them).
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "apps/mnist/checkpoint.h"
#include "apps/mnist/models.h"
#include "kiln/kiln.h"
#include "kiln/core/safetensors.h"
#include "tests/apps/app_test.h"
#include "tests/apps/run_app.h"

using namespace kiln;
namespace fs = std::filesystem;
using kiln::test::Result;
using kiln::test::TempDir;

namespace {

std::string data_dir() { return test::mnist_dir(); }
bool have_data() { return test::have_mnist("train-images-idx3-ubyte"); }

// Whether this build has the Vulkan backend, which the cases of --device vulkan need.
#ifdef KILN_WITH_VULKAN
constexpr bool kVulkanBuilt = true;
#else
constexpr bool kVulkanBuilt = false;
#endif
const std::string kNoVulkanBackend = "this build of kiln has no Vulkan backend (KILN_VULKAN=OFF, or no Vulkan SDK)";

// Runs mnist-train with ARGS (and the MNIST folder, unless ARGS name one), after `prefix`: shell
// words such as an environment variable.
Result run(const std::string& args, const std::string& prefix = "") {
  std::string data = args.find("--data") == std::string::npos ? "--data '" + data_dir() + "' " : "";
  return test::run_shell(prefix + "'" + std::string(KILN_MNIST_TRAIN) + "' " + data + args);
}

// Starts mnist-train, waits until its metrics file shows a finished training step (so the Ctrl-C
// handler is in place and there is something to save), then sends SIGINT as Ctrl-C would.
// `grace_ms` after the first "train" line: time for the run to pass the step boundary that follows
// it (a signal inside that window stops at the boundary, as it should; a test that means a later
// phase waits it out, since a loaded machine may pause the run between the line and the check).
Result run_until_trained_then_interrupt(const std::string& args, const std::string& metrics, int signal = SIGINT,
                                        int grace_ms = 0) {
  std::optional<std::chrono::steady_clock::time_point> seen;
  return test::run_and_signal(
      "'" + std::string(KILN_MNIST_TRAIN) + "' --data '" + data_dir() + "' " + args,
      [&] {
        if (!seen && test::read_file(metrics).find("\"type\":\"train\"") != std::string::npos)
          seen = std::chrono::steady_clock::now();
        return seen && std::chrono::steady_clock::now() - *seen >= std::chrono::milliseconds(grace_ms);
      },
      signal);
}

double best_accuracy(const std::string& out) {
  auto at = out.find("best test accuracy ");
  REQUIRE(at != std::string::npos);
  return std::stod(out.substr(at + 19));
}

// The model tensors of two checkpoints, compared bit for bit.
void check_same_weights(const std::string& a, const std::string& b) {
  NamedTensors x = load_safetensors(a).tensors, y = load_safetensors(b).tensors;
  REQUIRE(x.size() == y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    CHECK(x[i].first == y[i].first);
    CHECK_MESSAGE(x[i].second.to_vector<float>() == y[i].second.to_vector<float>(), x[i].first);
  }
}

const std::string kQuick = "--model cnn --limit-train 640 --limit-test 500 --test-batch-size 500 -q ";

}  // namespace

TEST_CASE("--help, --version and a bad flag give exit codes 0, 0 and 2") {
  Result help = run("--help");
  CHECK(help.code == 0);
  CHECK(help.out.find("--batch-size") != std::string::npos);
  // files and folders are named as such, not TEXT
  for (const char* option : {"--config FILE", "--data DIR", "--save PATH", "--resume PATH", "--metrics-out PATH",
                             "--plot PATH", "--device DEVICE"})
    CHECK_MESSAGE(help.out.find(option) != std::string::npos, option, "\n", help.out);
  CHECK_MESSAGE(help.out.find(" TEXT") == std::string::npos, help.out);
  Result version = run("--version");
  CHECK(version.code == 0);
  CHECK(version.out.find("mnist-train (kiln)") != std::string::npos);
  CHECK(run("--no-such-flag").code == 2);
  CHECK(run("--model resnet").code == 2);
  CHECK(run("--device tpu").code == 2);
  CHECK(run("--epochs 0").code == 2);
  Result missing = run("--data /nonexistent-kiln-data --epochs 1");
  CHECK(missing.code == 1);
  CHECK(missing.out.find("scripts/setup") != std::string::npos);
  // the error in words; where the check is in kiln's source only with -v
  CHECK_MESSAGE(missing.out.find(".cpp:") == std::string::npos, missing.out);
  Result verbose = run("--data /nonexistent-kiln-data --epochs 1 -v");
  CHECK_MESSAGE(verbose.out.find(".cpp:") != std::string::npos, verbose.out);
}

TEST_CASE("numeric flags refuse NaN, infinities and values out of range before any work: exit code 2, the rule in words") {
  struct Case {
    const char* args;
    const char* rule;
  };
  for (const Case& c : {Case{"--lr nan", "a finite number > 0, got nan"}, Case{"--lr inf", "a finite number > 0"},
                        Case{"--lr -0.1", "a finite number > 0, got -0.1"}, Case{"--momentum nan", "[0, 1]"},
                        Case{"--momentum 1.5", "a number in [0, 1], got 1.5"}, Case{"--weight-decay nan", ">= 0"},
                        Case{"--gamma nan", "> 0"}, Case{"--gamma -1", "> 0, got -1"}, Case{"--seed -1", ">= 0"},
                        Case{"--limit-train -5", ">= 0, got -5"}, Case{"--limit-test -1", ">= 0"},
                        Case{"--epochs 0", "> 0, got 0"}, Case{"--batch-size -64", "> 0"},
                        Case{"--log-interval 0", "> 0"}, Case{"--augment 9", "[0, 8], got 9"},
                        Case{"--lr 1e", "expected a finite number > 0, got '1e'"}}) {
    // --data that does not exist: a flag that passed would fail later, with exit code 1
    Result r = run(std::string(c.args) + " --data /nonexistent-kiln-data");
    CHECK_MESSAGE(r.code == 2, c.args, ": ", r.out);
    CHECK_MESSAGE(r.out.find(c.rule) != std::string::npos, c.args, ": ", r.out);
    CHECK_MESSAGE(r.out.find("1.79769") == std::string::npos, c.args, ": ", r.out);  // no 309-digit bounds
  }
  TempDir dir;
  std::ofstream(dir.file("extra.toml")) << "epochs = 1\nlearning-rate = 0.5\n";  // --lr is the flag
  Result extra = run("--config '" + dir.file("extra.toml") + "' --data /nonexistent-kiln-data");
  CHECK_MESSAGE(extra.code == 2, extra.out);
  CHECK_MESSAGE(extra.out.find("learning-rate") != std::string::npos, extra.out);
  std::ofstream(dir.file("garbage.toml")) << "this is not a config file\n\x01\x02 = [\n";
  Result garbage = run("--config '" + dir.file("garbage.toml") + "' --data /nonexistent-kiln-data");
  CHECK_MESSAGE(garbage.code == 2, garbage.out);
}

TEST_CASE("a flag given a value that is no count is a usage error naming it, not a crash") {
  // CLI11 2.1 counts a flag's values with std::stoll and let its exceptions through: --quiet=abc
  // and a config file's "verbose = loud" ended in std::terminate (found by fuzz_train_argv and
  // fuzz_train_config; the inputs are in tests/fuzz/corpus), and huge counts overflowed.
  TempDir dir;
  std::ofstream(dir.file("loud.toml")) << "verbose = loud\n";
  for (const std::string& args : {std::string("--quiet=abc"), std::string("--verbose=99999999999999999999"),
                                  std::string("-v --verbose=4294967297"), "--config '" + dir.file("loud.toml") + "'"}) {
    Result r = run(args + " --data /nonexistent-kiln-data");
    CHECK_MESSAGE(r.code == 2, args, ": ", r.out);
    CHECK_MESSAGE(r.out.find("or a count up to 2^32, got '") != std::string::npos, args, ": ", r.out);
  }
  // What CLI11 counts still works: the run goes on to find no data (exit 1).
  Result counted = run("--verbose=2 --quiet=true --tf32=on --data /nonexistent-kiln-data");
  CHECK_MESSAGE(counted.code == 1, counted.out);
}

TEST_CASE("--precision takes f32, tf32 or bf16, --tf32 is its alias, and the two together are refused: exit code 2") {
  for (const std::string& args : {std::string("--precision f32"), std::string("--precision tf32"), std::string("--tf32"),
                                  std::string("--precision bf16")}) {
    Result r = run(args + " --data /nonexistent-kiln-data");  // parsed, then no data: exit 1
    CHECK_MESSAGE(r.code == 1, args, ": ", r.out);
  }
  Result bad = run("--precision f16 --data /nonexistent-kiln-data");
  CHECK_MESSAGE(bad.code == 2, bad.out);
  CHECK_MESSAGE(bad.out.find("f16 not in {f32,tf32,bf16}") != std::string::npos, bad.out);
  Result both = run("--tf32 --precision f32 --data /nonexistent-kiln-data");
  CHECK_MESSAGE(both.code == 2, both.out);
  CHECK_MESSAGE(both.out.find("excludes") != std::string::npos, both.out);
}

TEST_CASE("--graph takes auto, on or off; on is refused, by name, where steps cannot be captured") {
  Result bad = run("--graph sometimes --data /nonexistent-kiln-data");
  CHECK_MESSAGE(bad.code == 2, bad.out);
  for (const std::string& args : {std::string("--graph auto"), std::string("--graph off")}) {
    Result r = run(args + " --device cpu --data /nonexistent-kiln-data");  // parsed, then no data: exit 1
    CHECK_MESSAGE(r.code == 1, args, ": ", r.out);
    CHECK_MESSAGE(r.out.find("--graph") == std::string::npos, args, ": ", r.out);
  }
  Result cpu = run("--graph on --device cpu --data /nonexistent-kiln-data");
  CHECK_MESSAGE(cpu.code == 1, cpu.out);
  CHECK_MESSAGE(cpu.out.find("--graph on: cannot capture the training step on cpu: it needs a CUDA device") !=
                    std::string::npos, cpu.out);
}

TEST_CASE("--precision bf16: the MLP trains in mixed precision on the CPU as in f32" * doctest::test_suite("needs-mnist")) {
  if (!have_data()) return test::skip_without_mnist();
  const std::string args = "--model mlp --epochs 1 --limit-train 5000 --batch-size 16 --scheduler none --device cpu -q";
  Result f32 = run(args), b16 = run(args + " --precision bf16");
  REQUIRE_MESSAGE(f32.code == 0, f32.out);
  REQUIRE_MESSAGE(b16.code == 0, b16.out);
  // bf16's rounding moves each step a little: the same accuracy within a point, not the same bits
  CHECK(best_accuracy(b16.out) >= 90.0);
  CHECK(std::abs(best_accuracy(b16.out) - best_accuracy(f32.out)) <= 1.0);
}

TEST_CASE("the MLP trains to at least 90% in one epoch on 5,000 images on the CPU" *
          doctest::test_suite("needs-mnist")) {
  if (!have_data()) return test::skip_without_mnist();
  TempDir dir;
  Result r = run("--model mlp --epochs 1 --limit-train 5000 --batch-size 16 --scheduler none --device cpu -q "
                 "--metrics-out '" + dir.file("m.jsonl") + "' --plot '" + dir.file("m.png") + "'");
  REQUIRE_MESSAGE(r.code == 0, r.out);
  CHECK(best_accuracy(r.out) >= 90.0);
  CHECK(r.out.find("confusion matrix") != std::string::npos);
  // JSON Lines: the run (kiln's version, the device, the settings), progress, the epoch
  std::ifstream metrics(dir.file("m.jsonl"));
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(metrics, line);) lines.push_back(nlohmann::json::parse(line));
  REQUIRE(lines.size() >= 3);
  CHECK(lines.front()["type"] == "run");
  CHECK(lines.front()["kiln"] == KILN_VERSION);
  CHECK(lines.front()["device"] == "cpu");
  CHECK(lines.front()["settings"]["model"] == "mlp");
  CHECK(lines[1]["type"] == "train");
  CHECK(lines.back()["type"] == "epoch");
  CHECK(lines.back()["test_accuracy"].get<double>() >= 0.9);
  CHECK(fs::file_size(dir.file("m.png")) > 1000);
}

TEST_CASE("--device vulkan trains the MLP and the CNN on a subset to the CPU's accuracy" *
          doctest::test_suite("needs-mnist-vulkan")) {
  if (!have_data()) return test::skip_without_mnist();
  if (!kVulkanBuilt) return test::skip(kNoVulkanBackend);
  // lavapipe in CI (the CNN's direct conv kernels run there at a few images a second: a subset)
  for (const char* args : {"--model mlp --epochs 1 --limit-train 1280 --limit-test 500 --batch-size 32 -q",
                           "--model cnn --epochs 1 --limit-train 128 --limit-test 200 --test-batch-size 100 -q"}) {
    Result vk = run(std::string(args) + " --device vulkan");
    if (vk.code != 0 && vk.out.find("no Vulkan driver") != std::string::npos)
      return test::skip("no Vulkan device: " + vk.out, test::InCi::fail);  // CI installs lavapipe
    REQUIRE_MESSAGE(vk.code == 0, vk.out);
    CHECK(vk.out.find("device vulkan:0") != std::string::npos);
    Result cpu = run(std::string(args) + " --device cpu");
    REQUIRE_MESSAGE(cpu.code == 0, cpu.out);
    // the same seed, the same data and draws: the accuracies agree up to float rounding's effect
    CHECK_MESSAGE(std::abs(best_accuracy(vk.out) - best_accuracy(cpu.out)) <= 1.0, args << "\n" << vk.out << cpu.out);
  }
}

TEST_CASE("without a Vulkan loader, --device vulkan is an error naming it and --device auto goes on without" *
          doctest::test_suite("needs-mnist-vulkan")) {
  if (!have_data()) return test::skip_without_mnist();
  if (!kVulkanBuilt) return test::skip(kNoVulkanBackend);
  // kiln opens the loader at run time: a machine without libvulkan.so.1 still runs the CPU path
  const std::string no_loader = "KILN_VULKAN_LOADER=libkiln-no-such-loader.so.1 ";
  Result vk = run("--model mlp --epochs 1 --limit-train 64 --limit-test 64 -q --device vulkan", no_loader);
  CHECK(vk.code == 1);
  CHECK_MESSAGE(vk.out.find("no Vulkan loader: libkiln-no-such-loader.so.1") != std::string::npos, vk.out);
  CHECK_MESSAGE(vk.out.find("libvulkan1") != std::string::npos, vk.out);
  Result autod = run("--model mlp --epochs 1 --limit-train 64 --limit-test 64 -q --device auto", no_loader);
  CHECK_MESSAGE(autod.code == 0, autod.out);
  CHECK(autod.out.find("device vulkan") == std::string::npos);
}

TEST_CASE("2 epochs straight equal 1 epoch, save, resume, 1 more: bit for bit" * doctest::test_suite("needs-mnist")) {
  if (!have_data()) return test::skip_without_mnist();
  TempDir dir;
  REQUIRE(run(kQuick + "--epochs 2 --save '" + dir.file("straight") + "'").code == 0);
  REQUIRE(run(kQuick + "--epochs 1 --save '" + dir.file("split") + "'").code == 0);
  Result resumed = run(kQuick + "--epochs 2 --resume '" + dir.file("split") + "' --save '" + dir.file("split") + "'");
  REQUIRE_MESSAGE(resumed.code == 0, resumed.out);
  check_same_weights(dir.file("straight"), dir.file("split"));
  apps::LoadedCheckpoint c = apps::load_checkpoint(dir.file("split"));
  CHECK(c.state.epoch == 2);
  CHECK(c.state.step == 20);
  CHECK(c.state.model == "cnn");
}

TEST_CASE("Ctrl-C saves at the next step boundary; the run then resumes to the same weights" *
          doctest::test_suite("needs-mnist")) {
  if (!have_data()) return test::skip_without_mnist();
  TempDir dir;
  const std::string args = "--model cnn --limit-train 6400 --limit-test 500 --test-batch-size 500 -q --epochs 1 ";
  Result stopped = run_until_trained_then_interrupt(
      args + "--save '" + dir.file("ckpt") + "' --log-interval 1 --metrics-out '" + dir.file("m.jsonl") + "'",
      dir.file("m.jsonl"));
  REQUIRE_MESSAGE(stopped.code == 130, stopped.out);
  apps::LoadedCheckpoint c = apps::load_checkpoint(dir.file("ckpt"));
  CHECK(c.state.epoch == 0);
  CHECK(c.state.batch > 0);
  CHECK(c.state.batch < 100);
  CHECK(c.state.step == c.state.batch);
  Result resumed = run(args + "--resume '" + dir.file("ckpt") + "' --save '" + dir.file("ckpt") + "'");
  REQUIRE_MESSAGE(resumed.code == 0, resumed.out);
  REQUIRE(run(args + "--save '" + dir.file("straight") + "'").code == 0);
  check_same_weights(dir.file("straight"), dir.file("ckpt"));
}

TEST_CASE("SIGTERM stops as Ctrl-C does, with exit code 143; a signal during the last test pass saves and says so" *
          doctest::test_suite("needs-mnist")) {
  if (!have_data()) return test::skip_without_mnist();
  TempDir dir;
  const std::string args = "--model cnn --limit-train 6400 --limit-test 500 --test-batch-size 500 -q --epochs 1 ";
  Result term = run_until_trained_then_interrupt(
      args + "--save '" + dir.file("t") + "' --log-interval 1 --metrics-out '" + dir.file("t.jsonl") + "'",
      dir.file("t.jsonl"), SIGTERM);
  REQUIRE_MESSAGE(term.code == 143, term.out);
  apps::LoadedCheckpoint c = apps::load_checkpoint(dir.file("t"));
  CHECK(c.state.epoch == 0);
  CHECK(c.state.batch > 0);
  // One training step, then a test pass of 10,000 images (seconds on the CPU): the signal,
  // sent 100 ms after the step's metrics line is written, arrives during the test. Before, it was
  // lost and the run exited 0.
  Result late = run_until_trained_then_interrupt(
      "--model cnn --limit-train 64 --limit-test 10000 --epochs 1 --log-interval 1 --save '" + dir.file("late") +
          "' --metrics-out '" + dir.file("late.jsonl") + "'",
      dir.file("late.jsonl"), SIGINT, 100);
  CHECK_MESSAGE(late.code == 130, late.out);
  CHECK_MESSAGE(late.out.find("interrupted: stopped after epoch 1, whose end is saved") != std::string::npos, late.out);
  apps::LoadedCheckpoint end = apps::load_checkpoint(dir.file("late"));
  CHECK(end.state.epoch == 1);
  CHECK(end.state.batch == 0);
}

TEST_CASE("malformed checkpoints are refused with exit code 1 and a message naming the problem" *
          doctest::test_suite("needs-mnist")) {
  if (!have_data()) return test::skip_without_mnist();
  TempDir dir;
  REQUIRE(run(kQuick + "--epochs 1 --save '" + dir.file("good") + "'").code == 0);
  SafetensorsFile good = load_safetensors(dir.file("good"));
  auto variant = [&](const std::string& name, auto&& change) {
    SafetensorsFile f = good;
    change(f);
    save_safetensors(dir.file(name), f.tensors, f.metadata);
    return dir.file(name);
  };
  struct Case {
    std::string path;
    const char* message;
  };
  std::vector<Case> cases{
      {variant("no-format", [](SafetensorsFile& f) { f.metadata.erase("kiln.format"); }), "kiln.format"},
      {variant("wrong-format", [](SafetensorsFile& f) { f.metadata["kiln.format"] = "other/9"; }), "format 'other/9'"},
      {variant("no-optimizer", [](SafetensorsFile& f) { f.metadata.erase("kiln.optimizer"); }), "kiln.optimizer"},
      {variant("bad-base64", [](SafetensorsFile& f) { f.metadata["kiln.optimizer"] = "!!!!"; }), "not base64"},
      {variant("bad-nested", [](SafetensorsFile& f) { f.metadata["kiln.optimizer"] = "AAAA"; }), "fewer than the 8"},
      {variant("bad-epoch", [](SafetensorsFile& f) { f.metadata["kiln.epoch"] = "two"; }), "whole number"},
      {variant("bad-rng", [](SafetensorsFile& f) { f.metadata["kiln.rng"] = "17"; }), "seed:offset"},
      {variant("negative-epoch", [](SafetensorsFile& f) { f.metadata["kiln.epoch"] = "-5"; }),
       "'kiln.epoch' is -5, outside [0, 2^53]"},
      {variant("huge-epoch", [](SafetensorsFile& f) { f.metadata["kiln.epoch"] = "9223372036854775807"; }),
       "'kiln.epoch' is 9223372036854775807, outside"},
      {variant("negative-step", [](SafetensorsFile& f) { f.metadata["kiln.step"] = "-7"; }), "'kiln.step' is -7"},
      {variant("past-the-data", [](SafetensorsFile& f) { f.metadata["kiln.images"] = "6400000"; }),
       "this run's epoch has 10 batches"},
      {variant("fewer-steps", [](SafetensorsFile& f) {
         f.metadata["kiln.batch"] = "5";
         f.metadata["kiln.images"] = "320";
         f.metadata["kiln.step"] = "2";
       }), "after 2 steps"},
      {variant("other-model", [](SafetensorsFile& f) { f.metadata["kiln.model"] = "mlp"; }), "'mlp' model"},
      {variant("missing-weight", [](SafetensorsFile& f) { f.tensors.pop_back(); }), "fc2.bias"},
      {variant("wrong-shape", [](SafetensorsFile& f) { f.tensors[0].second = zeros({3, 3}); }), "conv1.weight"},
      {variant("extra-weight", [](SafetensorsFile& f) { f.tensors.emplace_back("fc3.weight", zeros({2})); }), "fc3.weight"},
      {variant("inf-weight",
               [](SafetensorsFile& f) {
                 std::vector<float> v = f.tensors[2].second.to_vector<float>();
                 v[0] = v[5] = INFINITY;
                 f.tensors[2].second = from_vector(v, f.tensors[2].second.shape());
               }),
       "holds 2 NaN or infinite values of"},
  };
  std::ofstream(dir.file("truncated"), std::ios::binary) << std::string(5, 'x');
  cases.push_back({dir.file("truncated"), "fewer than the 8"});
  cases.push_back({dir.file("absent"), "cannot open"});
  for (const Case& c : cases) {
    Result r = run(kQuick + "--epochs 2 --resume '" + c.path + "'");
    CHECK_MESSAGE(r.code == 1, c.path, ": ", r.out);
    CHECK_MESSAGE(r.out.find(c.message) != std::string::npos, c.path, ": ", r.out);
  }
}

TEST_CASE("stderr is spdlog's: -q and -v set the levels of mnist-train's and kiln's loggers, SPDLOG_LEVEL too" *
          doctest::test_suite("needs-mnist")) {
  if (!have_data()) return test::skip_without_mnist();
  const std::string args = "--model mlp --epochs 1 --limit-train 256 --limit-test 100 --device cpu ";
  const std::string bad_threads = "KILN_NUM_THREADS=two ";
  const std::string kiln_warning = "kiln: warning: KILN_NUM_THREADS='two' is not a whole number";
  auto has = [](const Result& r, const std::string& text) { return r.out.find(text) != std::string::npos; };

  Result plain = run(args, bad_threads);
  REQUIRE_MESSAGE(plain.code == 0, plain.out);
  CHECK(has(plain, "\ndata: 256 training and 100 test images from "));  // the program's info: no prefix
  CHECK(has(plain, kiln_warning));                                       // the library's warning
  CHECK_FALSE(has(plain, "kiln: cpu: "));                                 // the library's debug: not by default
  CHECK(has(plain, "best test accuracy "));

  Result quiet = run(args + "-q", bad_threads);
  CHECK(quiet.code == 0);
  CHECK_FALSE(has(quiet, "data: "));
  CHECK(has(quiet, kiln_warning));

  Result verbose = run(args + "-v", bad_threads);
  CHECK(verbose.code == 0);
  CHECK(has(verbose, "kiln: cpu: "));
  CHECK(has(verbose, "Linear("));  // the model, at debug level

  Result kiln_debug = run(args, bad_threads + "SPDLOG_LEVEL=off,kiln=debug ");
  CHECK(kiln_debug.code == 0);
  CHECK_FALSE(has(kiln_debug, "data: "));
  CHECK(has(kiln_debug, "kiln: cpu: "));
  CHECK(has(kiln_debug, "best test accuracy "));  // results are stdout, not the log

  Result off = run(args + "--data /nonexistent", "SPDLOG_LEVEL=off ");
  CHECK(off.code == 1);
  CHECK_MESSAGE(has(off, "mnist-train: error: "), off.out);  // errors show at every level
}

TEST_CASE("a diverging run stops at its first non-finite loss, naming the step; the metrics stay JSON, no checkpoint is written" *
          doctest::test_suite("needs-mnist")) {
  if (!have_data()) return test::skip_without_mnist();
  TempDir dir;
  Result r = run(kQuick + "--epochs 2 --lr 1e20 --log-interval 4 --save '" + dir.file("ckpt") + "' --metrics-out '" +
                 dir.file("m.jsonl") + "'");
  CHECK_MESSAGE(r.code == 1, r.out);
  CHECK_MESSAGE(r.out.find("the training loss is ") != std::string::npos, r.out);
  CHECK_MESSAGE(r.out.find(" at epoch 1, batch ") != std::string::npos, r.out);
  CHECK_MESSAGE(r.out.find(" of 10 (step ") != std::string::npos, r.out);
  CHECK(!fs::exists(dir.file("ckpt")));
  std::ifstream metrics(dir.file("m.jsonl"));
  int lines = 0;
  for (std::string line; std::getline(metrics, line); ++lines) {
    CAPTURE(line);
    CHECK(nlohmann::json::accept(line));  // JSON (a NaN would have been written null)
    CHECK(line.find("null") == std::string::npos);  // and no step past the first non-finite loss logged
  }
  CHECK(lines >= 1);
}

TEST_CASE("--detect-anomaly names the op where the diverging run's numbers first stop being finite" *
          doctest::test_suite("needs-mnist")) {
  if (!have_data()) return test::skip_without_mnist();
  Result r = run(kQuick + "--epochs 1 --lr 1e20 --detect-anomaly");
  CHECK_MESSAGE(r.code == 1, r.out);
  CHECK_MESSAGE(r.out.find("anomaly mode: the ") != std::string::npos, r.out);
  CHECK_MESSAGE(r.out.find("NaN or infinite value") != std::string::npos, r.out);
  CHECK_MESSAGE(r.out.find("the training loss is") == std::string::npos, r.out);  // caught before the loss
}

TEST_CASE("a model or optimizer state that is not finite is not saved, and the checkpoint there stays") {
  TempDir dir;
  std::shared_ptr<nn::Module> model = apps::make_model("mlp");
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  apps::save_checkpoint(dir.file("ckpt"), *model, opt, nullptr, {"mlp", "{}"});
  const auto saved = fs::file_size(dir.file("ckpt"));
  Tensor w = model->named_parameters()[0].second;
  {
    NoGradGuard no_grad;
    w.fill_(std::nan(""));
  }
  try {
    apps::save_checkpoint(dir.file("ckpt"), *model, opt, nullptr, {"mlp", "{}"});
    FAIL("expected a NonFiniteError");
  } catch (const NonFiniteError& e) {
    const std::string what = e.what();
    CHECK_MESSAGE(what.find("'" + model->named_parameters()[0].first + "' holds " + std::to_string(w.numel()) +
                            " NaN or infinite values") != std::string::npos, what);
    CHECK_MESSAGE(what.find("left as it was") != std::string::npos, what);
  }
  CHECK(fs::file_size(dir.file("ckpt")) == saved);
  apps::LoadedCheckpoint c = apps::load_checkpoint(dir.file("ckpt"));  // the good one, still whole
  CHECK(c.state.model == "mlp");
}

TEST_CASE("a FIFO, a directory or a device given as a file is refused at once, naming it") {
  TempDir dir;
  REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);
  fs::create_directory(dir.file("folder"));
  struct Case {
    std::string args;
    int code;
    std::string message;
  };
  const std::vector<Case> cases{
      {"--resume '" + dir.file("fifo") + "'", 1, "not a regular file"},
      {"--resume '" + dir.file("folder") + "'", 1, "not a regular file"},
      {"--resume /dev/zero", 1, "not a regular file"},
      {"--config '" + dir.file("fifo") + "'", 2, "not a regular file"},
      {"--config '" + dir.file("folder") + "'", 2, "not a regular file"},
  };
  for (const Case& c : cases) {
    Result r = run(kQuick + c.args, "timeout 20 ");  // a read of the FIFO would block: 124
    CHECK_MESSAGE(r.code == c.code, c.args, ": ", r.out);
    CHECK_MESSAGE(r.out.find(c.message) != std::string::npos, c.args, ": ", r.out);
  }
}

TEST_CASE("--config reads options from a TOML file; flags on the command line win" *
          doctest::test_suite("needs-mnist")) {
  if (!have_data()) return test::skip_without_mnist();
  TempDir dir;
  std::ofstream(dir.file("run.toml")) << "model = \"mlp\"\nepochs = 1\nlimit-train = 640\nlimit-test = 500\nbatch-size = 16\n";
  Result r = run("--config '" + dir.file("run.toml") + "' --batch-size 32");
  REQUIRE_MESSAGE(r.code == 0, r.out);
  CHECK(r.out.find("\"model\":\"mlp\"") != std::string::npos);
  CHECK(r.out.find("\"batch_size\":32") != std::string::npos);
  std::ofstream(dir.file("bad.toml")) << "epochs = \"many\"\n";
  CHECK(run("--config '" + dir.file("bad.toml") + "'").code == 2);
  CHECK(run("--config '" + dir.file("absent.toml") + "'").code == 2);
}

TEST_CASE("PyTorch loads a checkpoint as its model's state dict and computes the same logits" *
          doctest::test_suite("needs-mnist-torch")) {
  if (!have_data()) return test::skip_without_mnist();
  if (std::system("/usr/bin/python3 -c 'import numpy, torch' > /dev/null 2>&1") != 0)
    return test::skip("no PyTorch for /usr/bin/python3 (scripts/setup --dev installs it)");
  TempDir dir;
  for (const char* model : {"cnn", "mlp", "fast"}) {
    std::string ckpt = dir.file(std::string(model) + ".safetensors");
    REQUIRE(run(std::string("--model ") + model + " --epochs 1 --limit-train 256 --limit-test 100 -q --save '" +
                ckpt + "'").code == 0);
    Result torch = test::run_shell("/usr/bin/python3 '" + std::string(KILN_TORCH_LOAD_SCRIPT) + "' '" + ckpt + "'");
    REQUIRE_MESSAGE(torch.code == 0, torch.out);
    const std::string& out = torch.out;
    std::istringstream logits(out.substr(out.find("logits ") + 7));
    std::vector<double> theirs;
    for (double v; logits >> v;) theirs.push_back(v);

    apps::LoadedCheckpoint c = apps::load_model_checkpoint(ckpt);
    std::shared_ptr<nn::Module> net = apps::make_model(c.state.model);
    net->load_state_dict(c.model);
    net->eval();
    NoGradGuard no_grad;
    std::vector<float> ramp(2 * 784);
    for (size_t i = 0; i < ramp.size(); ++i)
      ramp[i] = static_cast<float>((static_cast<double>(i % 256) / 255.0 - 0.1307) / 0.3081);
    std::vector<float> ours = (*net)(from_vector(ramp, {2, 1, 28, 28})).to_vector<float>();
    REQUIRE(theirs.size() == ours.size());
    for (size_t i = 0; i < ours.size(); ++i) CHECK(ours[i] == doctest::Approx(theirs[i]).epsilon(1e-4));
  }
}
