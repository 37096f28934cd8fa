// DataLoader: seeded shuffles, batch sizes, drop_last, and batches gathered from the right rows.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>

#include "kiln/kiln.h"
#include "kiln/datasets/loader.h"

using namespace kiln;

TEST_CASE("each epoch's order is a permutation, fixed by (seed, epoch)") {
  std::vector<int32_t> a = data::shuffled_order(1000, 7, 0);
  std::vector<int32_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int32_t> iota(1000);
  std::iota(iota.begin(), iota.end(), 0);
  CHECK(sorted == iota);
  CHECK(a != iota);
  CHECK(data::shuffled_order(1000, 7, 0) == a);
  CHECK(data::shuffled_order(1000, 7, 1) != a);
  CHECK(data::shuffled_order(1000, 8, 0) != a);
  // Every position is reachable: over many epochs each sample visits the first slot.
  std::vector<int> first(10, 0);
  for (int e = 0; e < 2000; ++e) ++first[static_cast<size_t>(data::shuffled_order(10, 1, e)[0])];
  for (int count : first) CHECK(count > 120);  // ~200 each
}

TEST_CASE("batches cover the data set once per epoch, rows kept with their targets") {
  int64_t n = 10;
  Tensor inputs = arange(0, 30).reshape({n, 3});  // row i holds 3i, 3i+1, 3i+2
  Tensor targets = arange(0, static_cast<double>(n), 1, DType::i32);
  data::DataLoader loader(inputs, targets, data::DataLoaderOptions().batch_size(4).seed(3));
  CHECK(loader.num_batches() == 3);
  std::vector<int32_t> seen;
  for (const data::Batch& b : loader) {
    CHECK(b.inputs.size(1) == 3);
    std::vector<float> x = b.inputs.to_vector<float>();
    std::vector<int32_t> t = b.targets.to_vector<int32_t>();
    for (size_t i = 0; i < t.size(); ++i) CHECK(x[3 * i] == static_cast<float>(3 * t[i]));
    seen.insert(seen.end(), t.begin(), t.end());
  }
  CHECK(seen.size() == 10);
  std::vector<int32_t> sorted = seen;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(loader.batch(2).targets.numel() == 2);  // the short last batch

  data::DataLoader dropping(inputs, targets, data::DataLoaderOptions().batch_size(4).drop_last(true));
  CHECK(dropping.num_batches() == 2);
  data::DataLoader ordered(inputs, targets, data::DataLoaderOptions().batch_size(4).shuffle(false));
  CHECK(ordered.batch(1).targets.to_vector<int32_t>() == std::vector<int32_t>{4, 5, 6, 7});
  CHECK_THROWS_AS(data::DataLoader(inputs, targets.slice(0, 0, 5)), ShapeError);
  CHECK_THROWS_AS(data::DataLoader(inputs, targets, data::DataLoaderOptions().batch_size(0)), ValueError);
}

TEST_CASE("normalize_images scales u8 pixels as PyTorch's MNIST example") {
  Tensor images = from_vector<uint8_t>({0, 255, 51, 102}, {1, 2, 2});
  Tensor x = data::normalize_images(images, Device::cpu());
  CHECK(x.shape() == Shape{1, 1, 2, 2});
  std::vector<float> v = x.to_vector<float>();
  CHECK(v[0] == doctest::Approx(-0.1307 / 0.3081).epsilon(1e-5));
  CHECK(v[1] == doctest::Approx((1.0 - 0.1307) / 0.3081).epsilon(1e-5));
  CHECK(v[2] == doctest::Approx((0.2 - 0.1307) / 0.3081).epsilon(1e-5));
}
