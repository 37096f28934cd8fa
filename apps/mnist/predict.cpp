// mnist-predict: reads handwritten digits with a model that mnist-train saved.
//
//   mnist-predict --model mnist.safetensors digit.png scan.jpg
//     digit.png: 7 (0.998)  0:0.000 1:0.000 2:0.001 3:0.000 4:0.000 5:0.000 6:0.000 7:0.998 8:0.000 9:0.001
//   mnist-predict --model mnist.safetensors --data data/mnist          (the test split's accuracy)
//   mnist-predict --model mnist.safetensors --idx IMAGES LABELS        (any labelled IDX pair)
//
// A picture (PNG, JPEG, BMP, ...) goes through apps::load_digit_image (image.h), which makes it
// look like MNIST (white ink on black, the digit in a 20x20 box centred by mass in 28x28), then
// through the normalisation of training; it gets the most likely digit and the 10 class
// probabilities (the softmax of the logits). An IDX images file given like a picture is recognised by its magic bytes
// and scored, with the labels file that MNIST's naming puts beside it, as --idx scores its pair.
//
// Exit codes: 0 done; 1 runtime error (a bad checkpoint, or an input that cannot be read: it is
// reported on stderr, the other inputs are still read); 2 usage error (unknown flag, bad value,
// nothing to read).
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>
#include <algorithm>
#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "apps/mnist/checkpoint.h"
#include "apps/mnist/cli.h"
#include "apps/mnist/device.h"
#include "apps/mnist/image.h"
#include "apps/mnist/log.h"
#include "apps/mnist/models.h"
#include "kiln/kiln.h"

namespace {

using namespace kiln;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int64_t kSide = 28;    // the models take MNIST's 28x28 images
constexpr int64_t kClasses = 10;
// MNIST's pixel mean and standard deviation: what data::normalize_images applies in training.
constexpr double kMean = 0.1307, kStd = 0.3081;

// ---- options ----

struct Config {
  std::string model;
  std::vector<std::string> inputs;  // pictures and IDX images files, in the order given
  std::string data;                 // a folder in MNIST's layout: its test split is scored
  std::vector<std::string> idx;     // images, labels
  std::string device = "auto";
  int64_t batch_size = 1000;
  bool json = false;
  int verbosity = 1;  // 0 quiet, 1 normal, 2 verbose
};

// The arguments and flags, in the order --help lists them; each writes into `c`.
void add_options(CLI::App& app, Config& c) {
  app.add_option("IMAGE", c.inputs,
                 "pictures of digits (PNG, JPEG, BMP, GIF, TGA or PNM), or IDX images files to score against the labels "
                 "beside them")
      ->type_name("");
  app.add_option("--model", c.model, "checkpoint written by mnist-train --save")->type_name("PATH")->required();
  app.add_option("--data", c.data, "score the test split of this folder in MNIST's layout")->type_name("DIR");
  app.add_option("--idx", c.idx, "score IDX images (the first file) against IDX labels (the second)")
      ->type_name("FILE")->expected(2);
  app.add_option("--device", c.device, "auto, cpu, cuda[:N] or vulkan[:N]")
      ->type_name("DEVICE")
      ->check(apps::check_device_spec)
      ->capture_default_str();
  app.add_option("--batch-size", c.batch_size, "images per forward pass")->check(apps::positive_number())->capture_default_str();
  app.add_flag("--json", c.json, "one JSON object per line instead of text");
  app.add_flag("-v,--verbose", [&](int64_t) { c.verbosity = 2; }, "more detail on stderr");
  app.add_flag("-q,--quiet", [&](int64_t) { c.verbosity = 0; }, "nothing on stderr but warnings and errors");
  app.set_version_flag("--version", apps::version_line("mnist-predict"));
}

// ---- output: results on stdout, the rest logged on stderr (apps/mnist/log.h) ----

bool g_verbose = false;  // -v: errors name where kiln's check is

// Failures are reported whatever the verbosity: they decide the exit code.
void report_error(const std::exception& e) { spdlog::error("{}", apps::error_text(e, g_verbose)); }

// ---- the model ----

// The net that the checkpoint names, with its weights, in evaluation mode on `device`.
std::shared_ptr<nn::Module> load_model(const std::string& path, const Device& device) {
  apps::LoadedCheckpoint checkpoint = apps::load_model_checkpoint(path);
  std::shared_ptr<nn::Module> model;
  try {
    model = apps::make_model(checkpoint.state.model);
    model->load_state_dict(checkpoint.model);
  } catch (const Error& e) {
    KILN_FAIL(SerializationError, "checkpoint '", path, "': ", e.message());
  }
  model->to(device);
  model->eval();
  spdlog::info("model: {} from {}", checkpoint.state.model, path);
  if (spdlog::should_log(spdlog::level::debug)) spdlog::debug("{}", (std::ostringstream() << *model).str());
  return model;
}

// ---- pictures ----

// A picture's line: the most likely digit, its probability and all ten (probs: [10]).
std::string prediction_line(const std::string& file, const float* probs, bool json) {
  int64_t digit = 0;
  for (int64_t k = 1; k < kClasses; ++k)
    if (probs[k] > probs[digit]) digit = k;
  std::string line;
  if (json) {
    nlohmann::ordered_json all = nlohmann::ordered_json::array();
    for (int64_t k = 0; k < kClasses; ++k) all.push_back(apps::rounded(probs[k], 6));
    line = apps::json_line(
        {{"file", file}, {"digit", digit}, {"probability", apps::rounded(probs[digit], 6)}, {"probabilities", all}});
  } else {
    line = fmt::format("{}: {} ({:.3f}) ", file, digit, probs[digit]);
    for (int64_t k = 0; k < kClasses; ++k) line += fmt::format(" {}:{:.3f}", k, probs[k]);
  }
  return line;
}

// Predicts a batch of pictures and prints a line for each, in the order given. A picture that
// cannot be read is reported and left out. Returns how many were left out.
int64_t predict_pictures(nn::Module& model, const std::vector<std::string>& paths, const Device& device,
                         const Config& c) {
  std::vector<std::string> read;
  std::vector<Tensor> pixels;  // f32 [28, 28] in [0, 1] each
  for (const std::string& path : paths) {
    try {
      pixels.push_back(apps::load_digit_image(path));
      read.push_back(path);
    } catch (const std::exception& e) {
      report_error(e);
    }
  }
  const auto failed = static_cast<int64_t>(paths.size() - read.size());
  if (read.empty()) return failed;

  Tensor x = ((stack(pixels).to(device) - kMean) / kStd).unsqueeze(1);  // [B, 1, 28, 28]
  std::vector<float> p = softmax(model(x), 1).to_vector<float>();       // [B, 10]
  for (size_t i = 0; i < read.size(); ++i)
    std::cout << prediction_line(read[i], p.data() + i * kClasses, c.json) << "\n";
  std::cout << std::flush;
  return failed;
}

// ---- labelled IDX sets ----

// IDX files start 00 00 <type> <rank>; the classic mirrors ship them gzip-compressed (1f 8b).
// No picture format starts either way.
bool looks_like_idx(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;  // a FIFO would block the read; the loader says why
  std::array<unsigned char, 4> head{};
  std::ifstream in(path, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(head.data()), head.size())) return false;
  if (head[0] == 0x1f && head[1] == 0x8b) return true;
  const bool known_type = head[2] == 0x08 || head[2] == 0x09 || (head[2] >= 0x0B && head[2] <= 0x0E);
  return head[0] == 0 && head[1] == 0 && known_type && head[3] >= 1 && head[3] <= 4;
}

// The labels file that MNIST's naming pairs with an images file, in the same folder:
// t10k-images-idx3-ubyte -> t10k-labels-idx1-ubyte (also "images.idx3", with or without .gz).
fs::path labels_beside(const fs::path& images) {
  std::string name = images.filename().string();
  const size_t kind = name.find("images");
  KILN_CHECK(kind != std::string::npos, data::DataError, images.string(),
             ": an IDX file, but its name does not say where its labels are (no 'images' in it); "
             "pass --idx IMAGES LABELS");
  name.replace(kind, 6, "labels");
  if (size_t rank = name.find("idx3"); rank != std::string::npos) name.replace(rank, 4, "idx1");
  if (name.ends_with(".gz")) name.resize(name.size() - 3);
  for (const std::string& candidate : {name, name + ".gz"}) {
    std::error_code ec;
    if (fs::is_regular_file(images.parent_path() / candidate, ec)) return images.parent_path() / candidate;
  }
  KILN_FAIL(data::DataError, images.string(), ": an IDX images file, but no labels file beside it (looked for ",
            (images.parent_path() / name).string(), " and .gz); pass --idx IMAGES LABELS");
}

struct LabelledSet {
  Tensor images;  // u8 [N, 28, 28] on the CPU
  Tensor labels;  // i32 [N] in 0..9 on the CPU
};

// Reads an IDX pair and checks that it is MNIST-shaped: images u8 [N, 28, 28], labels u8 [N], each
// a digit.
LabelledSet read_labelled_set(const fs::path& images_path, const fs::path& labels_path) {
  data::IdxFile images = data::read_idx(images_path);
  KILN_CHECK(images.type == DType::u8 && images.dims.size() == 3 && images.dims[1] == kSide && images.dims[2] == kSide,
             data::DataError, images_path.string(), ": expected u8 images [N, 28, 28] (IDX type 0x08, rank 3); this file holds ",
             images.type, " ", Shape(images.dims));
  data::IdxFile labels = data::read_idx(labels_path);
  KILN_CHECK(labels.type == DType::u8 && labels.dims.size() == 1, data::DataError, labels_path.string(),
             ": expected u8 labels [N] (IDX type 0x08, rank 1); this file holds ", labels.type, " ",
             Shape(labels.dims));
  KILN_CHECK(images.dims[0] == labels.dims[0], data::DataError, "image and label counts differ: ",
             images_path.string(), " holds ", images.dims[0], " images, ", labels_path.string(), " holds ",
             labels.dims[0], " labels");
  std::vector<int32_t> classes(labels.bytes.begin(), labels.bytes.end());
  for (size_t i = 0; i < classes.size(); ++i)
    KILN_CHECK(classes[i] < kClasses, data::DataError, labels_path.string(), ": label ", classes[i], " at index ",
               i, " is not a digit");
  return {data::to_tensor(images), from_vector(classes, Shape{images.dims[0]})};
}

// Correct predictions over the set, in batches on the device; the count stays there until the end.
int64_t count_correct(nn::Module& model, const LabelledSet& set, const Device& device, int64_t batch_size) {
  const int64_t n = set.images.size(0);
  Tensor targets = set.labels.to(device);
  Tensor correct = zeros({}, TensorOptions(DType::i32).device(device));
  for (int64_t start = 0; start < n; start += batch_size) {
    const int64_t end = std::min(n, start + batch_size);
    Tensor logits = model(data::normalize_images(set.images.slice(0, start, end), device, kMean, kStd));
    add_correct(correct, logits, targets.slice(0, start, end));
  }
  return static_cast<int64_t>(correct.item());
}

// Accuracy over a labelled set, printed as a line of text or JSON (-v: with the time it took).
void evaluate(nn::Module& model, const fs::path& images_path, const fs::path& labels_path, const Device& device,
              const Config& c) {
  Clock::time_point t0 = Clock::now();
  const LabelledSet set = read_labelled_set(images_path, labels_path);
  const int64_t n = set.images.size(0);
  const int64_t right = count_correct(model, set, device, c.batch_size);
  const double accuracy = static_cast<double>(right) / static_cast<double>(n);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (c.json) {
    std::cout << apps::json_line({{"images", images_path.string()},
                                  {"labels", labels_path.string()},
                                  {"count", n},
                                  {"correct", right},
                                  {"accuracy", apps::rounded(accuracy, 6)}})
              << std::endl;
  } else {
    std::cout << fmt::format("{}: accuracy {:.2f}% ({} of {} correct)", images_path.string(), 100 * accuracy, right, n)
              << std::endl;
  }
  spdlog::debug("{}: {} images in {:.2f} s ({:.0f} img/s)", images_path.string(), n, secs,
                static_cast<double>(n) / std::max(secs, 1e-9));
}

// ---- the run ----

int run(const Config& c) {
  Device device = apps::pick_device(c.device);
  std::shared_ptr<nn::Module> model = load_model(c.model, device);
  NoGradGuard no_grad;
  int64_t failures = 0;
  auto attempt = [&](auto&& step) {
    try {
      step();
    } catch (const std::exception& e) {
      report_error(e);
      ++failures;
    }
  };

  std::vector<std::string> pictures;  // waiting for a full batch, or for the next IDX file
  auto flush = [&] {
    if (!pictures.empty()) failures += predict_pictures(*model, pictures, device, c);
    pictures.clear();
  };
  for (const std::string& input : c.inputs) {
    if (looks_like_idx(input)) {
      flush();
      attempt([&] { evaluate(*model, input, labels_beside(input), device, c); });
    } else {
      pictures.push_back(input);
      if (static_cast<int64_t>(pictures.size()) == c.batch_size) flush();
    }
  }
  flush();
  if (c.idx.size() == 2) attempt([&] { evaluate(*model, c.idx[0], c.idx[1], device, c); });
  if (!c.data.empty()) {
    attempt([&] {
      data::MnistFiles files = data::find_mnist(c.data, data::Split::test);
      evaluate(*model, files.images, files.labels, device, c);
    });
  }
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"mnist-predict: reads handwritten digits with a model saved by mnist-train"};
  add_options(app, c);
  auto something_to_read = [&] {
    if (c.inputs.empty() && c.data.empty() && c.idx.empty())
      throw CLI::ValidationError("nothing to read: give pictures, IDX files, --data DIR or --idx IMAGES LABELS");
  };
  if (std::optional<int> code = apps::parse_command_line(app, argc, argv, something_to_read)) return *code;
  g_verbose = c.verbosity >= 2;
  apps::start_logging("mnist-predict", c.verbosity);
  try {
    return run(c);
  } catch (const std::exception& e) {
    report_error(e);
    return 1;
  }
}
