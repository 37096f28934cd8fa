// mnist-predict end to end, running the built binary. Exit codes, output formats and IDX scoring
// use a checkpoint of an untrained MLP and hand-made files, so they run anywhere; the accuracy
// cases train an MLP with mnist-train for one quick epoch and need the MNIST files (the doctest
// suite needs-mnist: skipped without them, failed under CI=true, where scripts/setup fetches them).
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include <cmath>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "apps/mnist/checkpoint.h"
#include "apps/mnist/models.h"
#include "kiln/kiln.h"
#include "kiln/core/safetensors.h"
#include "kiln/datasets/mnist.h"
#include "kiln/optim/optim.h"

#include "apps/mnist/stb.h"
#include "tests/apps/app_test.h"

using namespace kiln;
namespace fs = std::filesystem;
using kiln::test::TempDir;

namespace {

std::string data_dir() { return test::mnist_dir(); }
bool have_data() { return test::have_mnist("t10k-images-idx3-ubyte"); }

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  fs::remove(path);
  return text.str();
}

struct Result {
  int code;
  std::string out, err;
};

Result run_binary(const char* binary, const std::string& args) {
  std::string base = (fs::temp_directory_path() / ("kiln-run-" + std::to_string(::getpid()))).string();
  std::string cmd = "'" + std::string(binary) + "' " + args + " > '" + base + ".out' 2> '" + base + ".err'";
  int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(base + ".out"), slurp(base + ".err")};
}
Result predict(const std::string& args) { return run_binary(KILN_MNIST_PREDICT, args); }

std::string in_quotes(const std::string& path) { return "'" + path + "'"; }

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// A checkpoint as mnist-train writes it, of an MLP that has not been trained.
std::string untrained_checkpoint(const TempDir& dir) {
  std::shared_ptr<nn::Module> model = apps::make_model("mlp");
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1));
  apps::save_checkpoint(dir.file("untrained"), *model, opt, nullptr, {"mlp", "{}"});
  return dir.file("untrained");
}

// A grey PNG: 0 black, 255 white.
void write_png(const std::string& path, const std::vector<uint8_t>& grey, int width, int height) {
  REQUIRE(stbi_write_png(path.c_str(), width, height, 1, grey.data(), width) != 0);
}

// A "1" drawn as MNIST draws digits: a white bar on black, 28x28.
std::string drawn_one(const TempDir& dir) {
  std::vector<uint8_t> grey(28 * 28, 0);
  for (int y = 5; y < 23; ++y)
    for (int x = 13; x < 16; ++x) grey[static_cast<size_t>(y * 28 + x)] = 255;
  write_png(dir.file("one.png"), grey, 28, 28);
  return dir.file("one.png");
}

// An IDX file: 00 00 08 <rank>, the dimensions as big-endian u32, then the bytes.
void write_idx(const std::string& path, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.put(0).put(0).put(0x08).put(static_cast<char>(dims.size()));
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) out.put(static_cast<char>((d >> shift) & 0xff));
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// One JSON line of a picture: the file, the digit and the 10 probabilities.
struct Prediction {
  std::string file;
  int digit = -1;
  std::vector<double> probabilities;
};

// A --json line, parsed by nlohmann-json (so it must be JSON).
Prediction parse_prediction(const std::string& line) {
  REQUIRE_MESSAGE(nlohmann::json::accept(line), line);
  const nlohmann::json j = nlohmann::json::parse(line);
  return {j.at("file").get<std::string>(), j.at("digit").get<int>(), j.at("probabilities").get<std::vector<double>>()};
}

double accuracy_percent(const std::string& out) {
  auto at = out.find(": accuracy ");
  REQUIRE_MESSAGE(at != std::string::npos, out);
  return std::stod(out.substr(at + 11));
}

// One model for the cases that need MNIST, trained once per test run.
const std::string& trained_model() {
  static TempDir dir;
  static std::string path = [] {
    std::string out = dir.file("mlp");
    Result r = run_binary(KILN_MNIST_TRAIN, "--data " + in_quotes(data_dir()) +
                                                " --model mlp --epochs 1 --limit-train 5000 --batch-size 16 "
                                                "--scheduler none --limit-test 500 --device cpu -q --save " +
                                                in_quotes(out));
    REQUIRE_MESSAGE(r.code == 0, r.out, r.err);
    return out;
  }();
  return path;
}

}  // namespace

TEST_CASE("--help, --version, bad flags and nothing to read give exit codes 0, 0 and 2") {
  TempDir dir;
  const std::string model = "--model " + in_quotes(untrained_checkpoint(dir)) + " ";
  const std::string one = in_quotes(drawn_one(dir));
  Result help = predict("--help");
  CHECK(help.code == 0);
  CHECK(help.out.find("--model PATH REQUIRED") != std::string::npos);
  CHECK(help.out.find("--device DEVICE") != std::string::npos);
  CHECK_MESSAGE(help.out.find(" TEXT") == std::string::npos, help.out);
  Result version = predict("--version");
  CHECK(version.code == 0);
  CHECK(version.out.find("mnist-predict (kiln)") != std::string::npos);
  CHECK(predict(model + "--no-such-flag " + one).code == 2);
  CHECK(predict(one).code == 2);  // no --model
  CHECK(predict(model + "--device tpu " + one).code == 2);
  CHECK(predict(model + "--batch-size 0 " + one).code == 2);
  CHECK(predict(model + "--idx only-one-file").code == 2);
  Result nothing = predict(model);
  CHECK(nothing.code == 2);
  CHECK(nothing.err.find("nothing to read") != std::string::npos);
  CHECK(predict(model + "-q " + one).code == 0);
}

TEST_CASE("a picture gets one line: the digit, its probability and the 10 probabilities") {
  TempDir dir;
  const std::string model = "--model " + in_quotes(untrained_checkpoint(dir)) + " -q ";
  const std::string one = drawn_one(dir);
  Result text = predict(model + in_quotes(one));
  REQUIRE_MESSAGE(text.code == 0, text.err);
  CHECK(text.err.empty());
  std::vector<std::string> out = lines(text.out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].rfind(one + ": ", 0) == 0);
  CHECK(out[0].find(")  0:") != std::string::npos);
  CHECK(out[0].find(" 9:") != std::string::npos);

  Result json = predict(model + "--json " + in_quotes(one));
  REQUIRE(json.code == 0);
  Prediction p = parse_prediction(json.out);
  CHECK(p.file == one);
  REQUIRE(p.probabilities.size() == 10);
  double sum = 0;
  for (double v : p.probabilities) sum += v;
  CHECK(sum == doctest::Approx(1.0).epsilon(1e-4));
  CHECK(p.probabilities[static_cast<size_t>(p.digit)] ==
        *std::max_element(p.probabilities.begin(), p.probabilities.end()));

  // a file name with a quote, a backslash, a tab and a control character is escaped; bytes that
  // are not UTF-8 become U+FFFD (the line stays JSON)
  const std::string odd = dir.file("o\"d\\d\t\x01.png"), not_utf8 = dir.file("bad\xff.png");
  fs::copy_file(one, odd);
  fs::copy_file(one, not_utf8);
  Result escaped = predict(model + "--json " + in_quotes(odd) + " " + in_quotes(not_utf8));
  REQUIRE_MESSAGE(escaped.code == 0, escaped.err);
  std::vector<std::string> json_lines = lines(escaped.out);
  REQUIRE(json_lines.size() == 2);
  CHECK(parse_prediction(json_lines[0]).file == odd);
  CHECK(parse_prediction(json_lines[1]).file == dir.file("bad\xEF\xBF\xBD.png"));
}

TEST_CASE("an unreadable picture is reported and the others still predicted: exit code 1") {
  TempDir dir;
  const std::string model = "--model " + in_quotes(untrained_checkpoint(dir)) + " -q ";
  const std::string one = drawn_one(dir);
  std::ofstream(dir.file("notes.png")) << "not a picture";
  write_png(dir.file("blank.png"), std::vector<uint8_t>(28 * 28, 255), 28, 28);
  Result r = predict(model + "--batch-size 2 " + in_quotes(one) + " " + in_quotes(dir.file("absent.png")) + " " +
                     in_quotes(dir.file("notes.png")) + " " + in_quotes(dir.file("blank.png")) + " " + in_quotes(one));
  CHECK(r.code == 1);
  CHECK(lines(r.out).size() == 2);
  CHECK(r.err.find("absent.png") != std::string::npos);
  CHECK(r.err.find("notes.png") != std::string::npos);
  CHECK(r.err.find("blank.png") != std::string::npos);
}

TEST_CASE("bad checkpoints: exit code 1 and a message naming the file") {
  TempDir dir;
  const std::string good = untrained_checkpoint(dir);
  const std::string one = in_quotes(drawn_one(dir));
  SafetensorsFile f = load_safetensors(good);
  auto variant = [&](const std::string& name, auto&& change) {
    SafetensorsFile copy = f;
    change(copy);
    save_safetensors(dir.file(name), copy.tensors, copy.metadata);
    return dir.file(name);
  };
  std::ofstream(dir.file("garbage")) << "not a checkpoint";
  REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);  // reading it would block forever
  struct Case {
    std::string path;
    std::string message;
  };
  std::vector<Case> cases{
      {dir.file("absent"), "cannot open"},
      {dir.file("garbage"), "safetensors"},
      {dir.file("fifo"), "not a regular file (a directory, a FIFO or a device)"},
      {dir.path(), "not a regular file"},
      {variant("no-format", [](SafetensorsFile& c) { c.metadata.erase("kiln.format"); }), "kiln.format"},
      {variant("other-model", [](SafetensorsFile& c) { c.metadata["kiln.model"] = "cnn"; }), "conv1.weight"},
      {variant("unknown-model", [](SafetensorsFile& c) { c.metadata["kiln.model"] = "resnet"; }), "'resnet'"},
      {variant("missing-weight", [](SafetensorsFile& c) { c.tensors.pop_back(); }), "fc2.bias"},
      {variant("nan-weight",
               [](SafetensorsFile& c) {
                 std::vector<float> v = c.tensors[1].second.to_vector<float>();
                 v[3] = std::nanf("");
                 c.tensors[1].second = from_vector(v, c.tensors[1].second.shape());
               }),
       "'" + f.tensors[1].first + "' holds 1 NaN or infinite value of"},
  };
  Result picture = predict("--model " + in_quotes(good) + " " + in_quotes(dir.file("fifo")));
  CHECK_MESSAGE(picture.code == 1, picture.err);
  CHECK_MESSAGE(picture.err.find("fifo: cannot open: not a regular file") != std::string::npos, picture.err);
  for (const Case& c : cases) {
    Result r = predict("--model " + in_quotes(c.path) + " " + one);
    CHECK_MESSAGE(r.code == 1, c.path, ": ", r.err);
    CHECK_MESSAGE(r.err.find(c.path) != std::string::npos, c.path, ": ", r.err);
    CHECK_MESSAGE(r.err.find(c.message) != std::string::npos, c.path, ": ", r.err);
    CHECK(r.out.empty());
  }
}

TEST_CASE("an IDX images file is scored against the labels beside it, as --idx scores a pair") {
  TempDir dir;
  const std::string model = "--model " + in_quotes(untrained_checkpoint(dir)) + " -q ";
  std::vector<uint8_t> pixels(3 * 28 * 28, 0);
  for (size_t i = 0; i < pixels.size(); i += 7) pixels[i] = 200;
  const std::string images = dir.file("set-images-idx3-ubyte");
  write_idx(images, {3, 28, 28}, pixels);
  Result alone = predict(model + in_quotes(images));
  CHECK(alone.code == 1);
  CHECK(alone.err.find("no labels file beside it") != std::string::npos);

  write_idx(dir.file("set-labels-idx1-ubyte"), {3}, {1, 2, 3});
  Result beside = predict(model + "--json " + in_quotes(images));
  REQUIRE_MESSAGE(beside.code == 0, beside.err);
  CHECK(beside.out.find("\"count\":3") != std::string::npos);
  Result pair = predict(model + "--json --batch-size 2 --idx " + in_quotes(images) + " " +
                        in_quotes(dir.file("set-labels-idx1-ubyte")));
  REQUIRE_MESSAGE(pair.code == 0, pair.err);
  CHECK(pair.out == beside.out);

  write_idx(dir.file("two-labels"), {2}, {1, 2});
  write_idx(dir.file("big-labels"), {3}, {1, 2, 10});
  CHECK(predict(model + "--idx " + in_quotes(images) + " " + in_quotes(dir.file("two-labels"))).err.find("counts differ") !=
        std::string::npos);
  Result big = predict(model + "--idx " + in_quotes(images) + " " + in_quotes(dir.file("big-labels")));
  CHECK(big.code == 1);
  CHECK(big.err.find("label 10 at index 2") != std::string::npos);
  Result missing = predict(model + "--data " + in_quotes(dir.file("no-such-folder")));
  CHECK(missing.code == 1);
  CHECK(missing.err.find("no MNIST test files") != std::string::npos);
}

TEST_CASE("a model trained for one quick epoch scores at least 85% on the MNIST test split" *
          doctest::test_suite("needs-mnist")) {
  if (!have_data()) return test::skip_without_mnist();
  const std::string model = "--model " + in_quotes(trained_model()) + " -q ";
  Result r = predict(model + "--data " + in_quotes(data_dir()));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(accuracy_percent(r.out) >= 85.0);
  CHECK(r.out.find("of 10000 correct") != std::string::npos);
  // The same file given directly, and in batches of 7 (a ragged last batch): the same count.
  Result direct = predict(model + "--batch-size 7 " + in_quotes((fs::path(data_dir()) / "t10k-images-idx3-ubyte").string()));
  REQUIRE_MESSAGE(direct.code == 0, direct.err);
  CHECK(direct.out.substr(direct.out.find(": accuracy")) == r.out.substr(r.out.find(": accuracy")));
}

TEST_CASE("20 MNIST test digits saved as pictures, some inverted, some enlarged, are read as their labels" *
          doctest::test_suite("needs-mnist")) {
  if (!have_data()) return test::skip_without_mnist();
  TempDir dir;
  data::MnistData test = data::load_mnist(data_dir(), data::Split::test);
  std::vector<uint8_t> pixels = test.images.slice(0, 0, 20).to_vector<uint8_t>();
  std::vector<int32_t> labels = test.labels.slice(0, 0, 20).to_vector<int32_t>();
  std::string args;
  for (size_t i = 0; i < 20; ++i) {
    std::vector<uint8_t> digit(pixels.begin() + static_cast<std::ptrdiff_t>(i * 784),
                               pixels.begin() + static_cast<std::ptrdiff_t>((i + 1) * 784));
    const bool invert = i % 2 == 1;  // black on white, as on paper
    const bool enlarge = i % 4 >= 2;  // 100x100, nearest neighbour
    if (invert)
      for (uint8_t& v : digit) v = static_cast<uint8_t>(255 - v);
    int side = 28;
    if (enlarge) {
      side = 100;
      std::vector<uint8_t> big(100 * 100);
      for (size_t y = 0; y < 100; ++y)
        for (size_t x = 0; x < 100; ++x) big[y * 100 + x] = digit[(y * 28 / 100) * 28 + x * 28 / 100];
      digit = std::move(big);
    }
    std::string path = dir.file("digit" + std::to_string(i) + "-" + std::to_string(labels[i]) + ".png");
    write_png(path, digit, side, side);
    args += ' ';  // (two appends: " " + in_quotes(path) trips GCC 12's -Wrestrict false positive)
    args += in_quotes(path);
  }
  Result r = predict("--model " + in_quotes(trained_model()) + " -q --json" + args);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  std::vector<std::string> out = lines(r.out);
  REQUIRE(out.size() == 20);
  int right = 0;
  for (size_t i = 0; i < 20; ++i) {
    Prediction p = parse_prediction(out[i]);
    CHECK(fs::path(p.file).filename().string().rfind("digit" + std::to_string(i) + "-", 0) == 0);
    REQUIRE(p.probabilities.size() == 10);
    double sum = 0;
    for (double v : p.probabilities) sum += v;
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-4));
    right += p.digit == labels[i];
  }
  MESSAGE(right, " of 20 pictures read as their labels");
  CHECK(right >= 17);
}

TEST_CASE("hostile pictures are refused one by one, naming the file, and the others still predicted") {
  TempDir dir;
  const std::string model = "--model " + in_quotes(untrained_checkpoint(dir)) + " -q ";
  const std::string one = drawn_one(dir);
  std::ofstream(dir.file("empty.png"), std::ios::binary).flush();
  // A PGM that declares 16000x16000 pixels and holds none of them.
  std::ofstream(dir.file("huge.pgm"), std::ios::binary) << "P5\n16000 16000\n255\n";
  // A PGM of a 28x28 "1" cut off after its first rows.
  std::ofstream(dir.file("cut.pgm"), std::ios::binary) << "P5\n28 28\n255\n" << std::string(100, '\xff');
  Result r = predict(model + in_quotes(dir.file("empty.png")) + " " + in_quotes(dir.file("huge.pgm")) + " " +
                     in_quotes(dir.file("cut.pgm")) + " " + in_quotes(one));
  CHECK(r.code == 1);
  CHECK(lines(r.out).size() == 1);
  CHECK(r.out.find("one.png") != std::string::npos);
  for (const char* expected :
       {"empty.png: an empty file (0 bytes)", "huge.pgm: 16000x16000 pixels", "cut.pgm: truncated"})
    CHECK_MESSAGE(r.err.find(expected) != std::string::npos, expected, "\n", r.err);
}

TEST_CASE("IDX images that are not 28x28 are refused, naming the file and the size the models take") {
  TempDir dir;
  const std::string model = "--model " + in_quotes(untrained_checkpoint(dir)) + " -q ";
  const std::string images = dir.file("small-images-idx3-ubyte");
  write_idx(images, {3, 20, 20}, std::vector<uint8_t>(3 * 20 * 20, 100));
  const std::string labels = dir.file("small-labels-idx1-ubyte");  // beside the images, as MNIST names them
  write_idx(labels, {3}, {1, 2, 3});
  for (const std::string& args : {in_quotes(images), "--idx " + in_quotes(images) + " " + in_quotes(labels)}) {
    Result r = predict(model + args);
    CHECK(r.code == 1);
    CHECK(r.out.empty());
    CHECK_MESSAGE(r.err.find(images + ": expected u8 images [N, 28, 28]") != std::string::npos, r.err);
    CHECK_MESSAGE(r.err.find("holds u8 [3, 20, 20]") != std::string::npos, r.err);
  }
}
