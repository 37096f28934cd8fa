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

#include <filesystem>

#include "kiln/core/tensor.h"
#include "kiln/datasets/idx.h"

namespace kiln::data {

enum class Split { train, test };

struct MnistFiles {
  std::filesystem::path images;
  std::filesystem::path labels;
};

struct MnistData {
  Tensor images;  // u8 [N, rows, cols] (28x28 for MNIST and its look-alikes), on the CPU
  Tensor labels;  // i32 [N], each in [0, num_classes): kiln's class targets are i32
};

// DataError when no folder holds the split's files: the message lists the names and folders tried
// and says how to get the data.
MnistFiles find_mnist(const std::filesystem::path& dir, Split split);

// Reads and checks the split: images u8 of rank 3, labels u8 of rank 1, as many labels as images,
// every label below num_classes (1 to 256).
MnistData load_mnist(const std::filesystem::path& dir, Split split, int num_classes = 10);

}  // namespace kiln::data
