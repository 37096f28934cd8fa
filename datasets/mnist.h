// Loader for datasets in MNIST's layout: MNIST itself, Fashion-MNIST, KMNIST (any pair of IDX
// files named like MNIST's).
//
// find_mnist looks in `dir`, then in dir/raw and in torchvision's dir/MNIST/raw,
// dir/FashionMNIST/raw and dir/KMNIST/raw, for each split's two files under either naming style,
// raw or gzip-compressed:
//   train-images-idx3-ubyte   train-images.idx3-ubyte   (+ .gz)   and the same for -labels-idx1-
//   t10k-images-idx3-ubyte    t10k-images.idx3-ubyte    (+ .gz)   and the same for -labels-idx1-
// Both files of a split come from the same folder; the uncompressed file wins over the .gz.
#pragma once

#include <cstdint>
#include <filesystem>

#include "kiln/core/tensor.h"
#include "kiln/datasets/idx.h"

namespace kiln::data {

enum class Split { train, test };

struct MnistFiles {
  std::filesystem::path images;
  std::filesystem::path labels;
};

// The side of an MNIST image; its look-alikes (Fashion-MNIST, KMNIST, EMNIST) share it, and the
// models built for them take 28x28 inputs.
inline constexpr int64_t kMnistSide = 28;

struct MnistData {
  Tensor images;  // u8 [N, 28, 28], on the CPU
  Tensor labels;  // i32 [N], each in [0, num_classes): kiln's class targets are i32
};

// DataError when no folder holds the split's files: the message lists the names and folders tried
// and says how to get the data.
MnistFiles find_mnist(const std::filesystem::path& dir, Split split);

// Reads and checks the split: images u8 [N, 28, 28], labels u8 [N] (as many as images), every
// label below num_classes (1 to 256). A file that breaks a rule is refused by name as soon as it
// is read (images of another size, say, rather than a shape error in the model's first layer).
MnistData load_mnist(const std::filesystem::path& dir, Split split, int num_classes = 10);

}  // namespace kiln::data
