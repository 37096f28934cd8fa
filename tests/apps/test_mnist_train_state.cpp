// What an mnist-train run leaves behind and picks up again: checkpoints that resume to the same
// bits for every optimizer and schedule wherever the run was stopped, the run's settings compared
// on --resume, --epochs changed on resume by a stated rule, and output files written whole (a full
// disk, a symbolic link, a device). Runs the built binary on a small MNIST-shaped data set made
// here, so it needs no download.
#include <doctest/doctest.h>

#include <signal.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "apps/mnist/checkpoint.h"
#include "apps/mnist/train_config.h"
#include "kiln/core/safetensors.h"
#include "tests/apps/run_app.h"
#include "tests/datasets/idx_writer.h"
#include "tests/temp_dir.h"

using namespace kiln;
namespace fs = std::filesystem;
using kiln::test::Result;
using kiln::test::TempDir;

namespace {

std::string quoted(const std::string& path) { return "'" + path + "'"; }

// Runs `mnist-train ARGS` under /bin/sh (after `prefix`, shell commands such as a ulimit) and
// returns its exit code and output.
Result run(const std::string& args, const std::string& prefix = "") {
  return test::run_shell(prefix + quoted(KILN_MNIST_TRAIN) + " " + args);
}

// Starts `mnist-train ARGS`, waits until `ready` (a file) exists, or, with `line`, holds a line
// containing it, then sends `signal`; returns how the process ended. A run that ends first is
// returned as it ended.
Result run_and_signal(const std::string& args, const std::string& ready, const std::string& line, int signal) {
  return test::run_and_signal(
      quoted(KILN_MNIST_TRAIN) + " " + args,
      [&] { return fs::exists(ready) && (line.empty() || test::read_file(ready).find(line) != std::string::npos); },
      signal);
}

// An MNIST-shaped data set in dir/mnist: `train` and `test` images of random pixels, each label's
// images a little brighter in a band of rows of its own, so that the models learn something.
std::string write_data(const TempDir& dir, uint32_t train, uint32_t test) {
  std::mt19937 random(7);
  auto write = [&](const std::string& split, uint32_t n) {
    test::Bytes pixels(size_t{n} * 784), labels(n);
    for (uint32_t i = 0; i < n; ++i) {
      labels[i] = static_cast<uint8_t>(random() % 10);
      for (uint32_t p = 0; p < 784; ++p)
        pixels[size_t{i} * 784 + p] = static_cast<uint8_t>(random() % 128 + (p / 28 / 3 == labels[i] ? 120 : 0));
    }
    dir.write("mnist/" + split + "-images-idx3-ubyte", test::idx_file(0x08, {n, 28, 28}, pixels));
    dir.write("mnist/" + split + "-labels-idx1-ubyte", test::idx_file(0x08, {n}, labels));
  };
  write("train", train);
  write("t10k", test);
  return "--data " + quoted(dir.file("mnist")) + " ";
}

// The tensors of two checkpoints' models, bit for bit.
bool same_weights(const std::string& a, const std::string& b) {
  NamedTensors x = load_safetensors(a).tensors, y = load_safetensors(b).tensors;
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i].first != y[i].first || x[i].second.to_vector<float>() != y[i].second.to_vector<float>()) return false;
  return true;
}

// The "lr" of each "epoch" line of a metrics file.
std::vector<double> epoch_lrs(const std::string& metrics) {
  std::vector<double> lrs;
  std::istringstream lines(test::read_file(metrics));
  for (std::string line; std::getline(lines, line);)
    if (line.find("\"type\":\"epoch\"") != std::string::npos) lrs.push_back(std::stod(line.substr(line.find("\"lr\":") + 5)));
  return lrs;
}

bool has_temporaries(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().find(".tmp.") != std::string::npos) return true;
  return false;
}

// The learning rate and momentum each optimizer trains this data with (SGD and RMSprop with
// momentum, so that their buffers are part of what must resume).
std::string optimizer_flags(const std::string& optimizer) {
  if (optimizer == "sgd") return "--optimizer sgd --lr 0.05 --momentum 0.5 ";
  if (optimizer == "rmsprop") return "--optimizer rmsprop --lr 0.001 --momentum 0.5 ";
  if (optimizer == "adadelta") return "--optimizer adadelta --lr 1.0 ";
  return "--optimizer " + optimizer + " --lr 0.002 ";
}

}  // namespace

TEST_CASE("every optimizer x scheduler resumes to the same bits, stopped by a signal mid-run or killed after a checkpoint" *
          doctest::test_suite("slow")) {
  TempDir dir;
  // The CNN (with dropout, and random shifts: both draw random numbers that must resume too), 8
  // steps an epoch, 2 epochs: slow enough on the CPU for a signal to land inside the run.
  const std::string base = write_data(dir, 64, 16) + "--device cpu --model cnn --epochs 2 --batch-size 8 "
                           "--test-batch-size 16 --augment 1 --log-interval 1 -q ";
  int stopped_inside = 0, runs = 0;
  for (const std::string& optimizer : std::vector<std::string>{"sgd", "adam", "adamw", "adadelta", "rmsprop"}) {
    for (const std::string& scheduler : std::vector<std::string>{"step", "cosine", "onecycle", "none"}) {
      CAPTURE(optimizer);
      CAPTURE(scheduler);
      const std::string args = base + optimizer_flags(optimizer) + "--scheduler " + scheduler + " ";
      const std::string straight = dir.file("straight"), stopped = dir.file("stopped"), killed = dir.file("killed");
      fs::remove(stopped);
      fs::remove(killed);
      Result alone = run(args + "--save " + quoted(straight));
      REQUIRE_MESSAGE(alone.code == 0, alone.out);

      // Ctrl-C once the first step is logged: the run saves where it stopped and exits 130.
      const std::string metrics = dir.file("m.jsonl");
      fs::remove(metrics);
      Result signalled = run_and_signal(args + "--save " + quoted(stopped) + " --metrics-out " + quoted(metrics), metrics,
                                        "\"type\":\"train\"", SIGINT);
      REQUIRE_MESSAGE((signalled.code == 130 || signalled.code == 0), signalled.out);
      if (signalled.code == 130) {
        ++stopped_inside;
        Result resumed = run(args + "--resume " + quoted(stopped) + " --save " + quoted(stopped));
        REQUIRE_MESSAGE(resumed.code == 0, resumed.out);
      }
      CHECK_MESSAGE(same_weights(straight, stopped), "stopped by SIGINT: ", signalled.out);

      // kill -9 as soon as epoch 1's checkpoint is in place: the same command resumes from it.
      Result kill9 = run_and_signal(args + "--save " + quoted(killed), killed, "", SIGKILL);
      if (kill9.code == 128 + SIGKILL) {
        Result resumed = run(args + "--resume " + quoted(killed) + " --save " + quoted(killed));
        REQUIRE_MESSAGE(resumed.code == 0, resumed.out);
      }
      CHECK_MESSAGE(same_weights(straight, killed), "killed after a checkpoint: ", kill9.out);
      ++runs;
    }
  }
  CHECK(runs == 20);
  // The point is resuming from inside an epoch: most runs must have been stopped there.
  CHECK_MESSAGE(stopped_inside >= 15, stopped_inside, " of 20 runs were stopped before they ended");
}

TEST_CASE("a grown --epochs on resume rebuilds cosine and one-cycle for the new total: the lr never drops to 0") {
  TempDir dir;
  const std::string base = write_data(dir, 128, 64) + "--device cpu --model mlp --batch-size 32 --test-batch-size 64 -q --optimizer sgd --lr 0.1 ";
  for (const std::string& scheduler : std::vector<std::string>{"cosine", "onecycle"}) {
    CAPTURE(scheduler);
    const std::string args = base + "--scheduler " + scheduler + " ";
    // 1 epoch (its schedule ends at lr ~0), then resumed to 3: as a 3-epoch run from epoch 2 on.
    REQUIRE(run(args + "--epochs 1 --save " + quoted(dir.file("short"))).code == 0);
    Result grown = run(args + "--epochs 3 --resume " + quoted(dir.file("short")) + " --metrics-out " +
                       quoted(dir.file("grown.jsonl")));
    REQUIRE_MESSAGE(grown.code == 0, grown.out);
    CHECK_MESSAGE(grown.out.find("schedule is rebuilt") != std::string::npos, grown.out);
    REQUIRE(run(args + "--epochs 3 --metrics-out " + quoted(dir.file("three.jsonl"))).code == 0);
    const std::vector<double> resumed_lrs = epoch_lrs(dir.file("grown.jsonl")), three = epoch_lrs(dir.file("three.jsonl"));
    REQUIRE(resumed_lrs.size() == 2);
    REQUIRE(three.size() == 3);
    CHECK(resumed_lrs[0] == doctest::Approx(three[1]).epsilon(1e-6));
    CHECK(resumed_lrs[1] == doctest::Approx(three[2]).epsilon(1e-6));
    CHECK(resumed_lrs[0] > 1e-3);
    fs::remove(dir.file("grown.jsonl"));
    fs::remove(dir.file("three.jsonl"));
  }
  // StepLR and none do not depend on the total: resuming to more epochs is exactly the longer run.
  const std::string step = base + "--scheduler step --gamma 0.5 ";
  REQUIRE(run(step + "--epochs 1 --save " + quoted(dir.file("s"))).code == 0);
  REQUIRE(run(step + "--epochs 2 --resume " + quoted(dir.file("s")) + " --save " + quoted(dir.file("s"))).code == 0);
  REQUIRE(run(step + "--epochs 2 --save " + quoted(dir.file("s2"))).code == 0);
  CHECK(same_weights(dir.file("s"), dir.file("s2")));
  // A finished run: nothing left to train, said so; fewer epochs than trained: refused.
  Result again = run(step + "--epochs 2 --resume " + quoted(dir.file("s")));
  CHECK_MESSAGE(again.code == 0, again.out);
  CHECK_MESSAGE(again.out.find("nothing left to train") != std::string::npos, again.out);
  CHECK_MESSAGE(again.out.find("best test accuracy") == std::string::npos, again.out);
  Result fewer = run(step + "--epochs 1 --resume " + quoted(dir.file("s")));
  CHECK(fewer.code == 1);
  CHECK_MESSAGE(fewer.out.find("more than --epochs 1") != std::string::npos, fewer.out);
}

TEST_CASE("settings changed on resume are refused with the list of differences, unless --allow-setting-changes") {
  TempDir dir;
  const std::string base = write_data(dir, 128, 64) + "--device cpu -q --scheduler step ";
  REQUIRE(run(base + "--model mlp --epochs 1 --batch-size 32 --optimizer sgd --lr 0.1 --seed 3 --save " + quoted(dir.file("c"))).code == 0);
  Result changed = run(base + "--model mlp --epochs 2 --batch-size 16 --optimizer sgd --lr 0.05 --seed 4 --resume " + quoted(dir.file("c")));
  CHECK(changed.code == 1);
  for (const char* difference : {"--lr: 0.1 in the checkpoint, 0.05 now", "--seed: 3 in the checkpoint, 4 now",
                                 "--batch-size x processes: 32 x 1 in the checkpoint, 16 x 1 now", "--allow-setting-changes"})
    CHECK_MESSAGE(changed.out.find(difference) != std::string::npos, difference, "\n", changed.out);
  // The flags that do not define the run may change freely.
  Result same = run(base + "--model mlp --epochs 2 --batch-size 32 --optimizer sgd --lr 0.1 --seed 3 --test-batch-size 32 "
                    "--log-interval 3 --resume " + quoted(dir.file("c")));
  CHECK_MESSAGE(same.code == 0, same.out);
  // Asked for: the new settings go on from the saved state, listed as the run starts.
  Result allowed = run(base + "--model mlp --epochs 2 --batch-size 32 --optimizer adam --lr 0.01 --seed 3 --allow-setting-changes "
                       "--resume " + quoted(dir.file("c")) + " --metrics-out " + quoted(dir.file("m.jsonl")));
  CHECK_MESSAGE(allowed.code == 0, allowed.out);
  CHECK_MESSAGE(allowed.out.find("--optimizer: \"sgd\" in the checkpoint, \"adam\" now") != std::string::npos, allowed.out);
  const std::vector<double> lrs = epoch_lrs(dir.file("m.jsonl"));
  REQUIRE(lrs.size() == 1);
  CHECK(lrs[0] == doctest::Approx(0.01 * 0.7 * 0.7));  // StepLR rebuilt from --lr 0.01, after epoch 2
  // The model never changes.
  Result model = run(base + "--model fast --epochs 2 --batch-size 32 --lr 0.1 --seed 3 --allow-setting-changes "
                     "--resume " + quoted(dir.file("c")));
  CHECK(model.code == 1);
  CHECK_MESSAGE(model.out.find("holds a 'mlp' model") != std::string::npos, model.out);
}

TEST_CASE("output files: a full disk stops the run naming the file and loses nothing; devices refused; links followed") {
  TempDir dir;
  const std::string args = write_data(dir, 128, 64) + "--device cpu --model mlp --epochs 1 --batch-size 32 --test-batch-size 64 -q ";
  REQUIRE(run(args + "--save " + quoted(dir.file("ckpt")) + " --plot " + quoted(dir.file("p.png"))).code == 0);
  const std::string ckpt = test::read_file(dir.file("ckpt")), png = test::read_file(dir.file("p.png"));
  // A disk that fills at 64 KiB: the MLP's checkpoint (400 KB) cannot be written. (RLIMIT_FSIZE
  // fails a write past it as a full disk does; SIGXFSZ ignored, as `ulimit -f` needs.)
  const std::string full = "trap '' XFSZ; ulimit -f 128; ";
  Result save = run(args + "--seed 2 --save " + quoted(dir.file("ckpt")), full);
  CHECK(save.code == 1);
  CHECK_MESSAGE(save.out.find(dir.file("ckpt")) != std::string::npos, save.out);
  CHECK_MESSAGE(save.out.find("File too large") != std::string::npos, save.out);
  CHECK(test::read_file(dir.file("ckpt")) == ckpt);
  // The plot (tens of KB) on a disk that fills at 4 KiB: refused whole, the last plot kept.
  Result plot = run(args + "--plot " + quoted(dir.file("p.png")), "trap '' XFSZ; ulimit -f 8; ");
  CHECK(plot.code == 1);
  CHECK_MESSAGE(plot.out.find(dir.file("p.png")) != std::string::npos, plot.out);
  CHECK(test::read_file(dir.file("p.png")) == png);
  CHECK_FALSE(has_temporaries(dir.path()));
  // Metrics on a device that is always full; and results on a full standard output.
  Result metrics = run(args + "--metrics-out /dev/full");
  CHECK(metrics.code == 1);
  CHECK_MESSAGE(metrics.out.find("'/dev/full' failed: No space left on device") != std::string::npos, metrics.out);
  const std::string log = dir.file("stdout-full.log");
  const int status = std::system((quoted(KILN_MNIST_TRAIN) + " " + args + "> /dev/full 2> " + quoted(log)).c_str());
  CHECK(WEXITSTATUS(status) == 1);
  CHECK_MESSAGE(test::read_file(log).find("standard output") != std::string::npos, test::read_file(log));
  // A metrics file cut by a full disk ends at its last whole line.
  Result cut = run(args + "--log-interval 1 --metrics-out " + quoted(dir.file("m.jsonl")), "trap '' XFSZ; ulimit -f 1; ");
  CHECK(cut.code == 1);
  const std::string lines = test::read_file(dir.file("m.jsonl"));
  CHECK(lines.size() <= 512);
  CHECK((lines.empty() || lines.back() == '\n'));

  // --save or --plot onto a device, a FIFO or a folder: refused before any training.
  for (const std::string& target : {std::string("/dev/null"), dir.path().string()}) {
    Result r = run(args + "--save " + quoted(target));
    CHECK(r.code == 1);
    CHECK_MESSAGE(r.out.find("is not a regular file") != std::string::npos, r.out);
    CHECK_MESSAGE(r.out.find("epoch  1") == std::string::npos, r.out);
  }
  CHECK(fs::is_character_file("/dev/null"));
  // Through a symbolic link: the file it names is replaced, the link stays.
  fs::create_directories(dir.path() / "real");
  fs::create_symlink("real/target", dir.path() / "link");
  REQUIRE(run(args + "--save " + quoted(dir.file("link"))).code == 0);
  CHECK(fs::is_symlink(dir.path() / "link"));
  CHECK(apps::load_checkpoint(dir.file("real/target")).state.epoch == 1);
  // Into folders that do not exist yet (a fresh checkout's out/): made.
  REQUIRE(run(args + "--save " + quoted(dir.file("out/run/ckpt")) + " --plot " + quoted(dir.file("out/p.png"))).code == 0);
  CHECK(fs::exists(dir.path() / "out/run/ckpt"));
  CHECK(fs::exists(dir.path() / "out/p.png"));
}

TEST_CASE("a damaged checkpoint's settings are refused, never converted or multiplied past int64") {
  const nlohmann::ordered_json now = apps::Config{}.settings(1);
  auto saved = [&](const char* key, const nlohmann::ordered_json& value) {
    nlohmann::ordered_json s = now;
    s[key] = value;
    return s;
  };
  // found by fuzz_checkpoint: 1e300 as batch_size (undefined in the conversion), 2^62 x 4 processes
  CHECK_THROWS_AS(apps::changed_settings(saved("batch_size", 1e300), now), ValueError);
  CHECK_THROWS_AS(apps::changed_settings(saved("processes", int64_t{1} << 62), now), ValueError);
  CHECK_THROWS_AS(apps::changed_settings(saved("batch_size", "64"), now), ValueError);
  CHECK_THROWS_AS(apps::changed_settings(saved("batch_size", -64), now), ValueError);
  CHECK_THROWS_AS(apps::parse_settings("[1, 2]", "ckpt"), ValueError);
  CHECK(apps::changed_settings(now, now).empty());
  const std::vector<apps::SettingChange> lr = apps::changed_settings(saved("lr", 0.5), now);
  REQUIRE(lr.size() == 1);
  CHECK(lr[0].flag == "--lr");
}
