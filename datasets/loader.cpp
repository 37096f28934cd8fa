#include "kiln/datasets/loader.h"

#include <numeric>

#include "kiln/autograd/ops.h"
#include "kiln/core/philox.h"

namespace kiln::data {

DataLoader::DataLoader(Tensor inputs, Tensor targets, DataLoaderOptions options)
    : inputs_(std::move(inputs)), targets_(std::move(targets)), options_(options) {
  KILN_CHECK(inputs_.dim() >= 1 && targets_.dim() >= 1 && inputs_.size(0) == targets_.size(0),
             ShapeError, "DataLoader: inputs ", inputs_.shape(), " and targets ", targets_.shape(),
             " must hold the same number of samples along axis 0");
  KILN_CHECK(inputs_.device() == targets_.device(), DeviceError, "DataLoader: inputs on ",
             inputs_.device(), ", targets on ", targets_.device());
  KILN_CHECK(options_.batch_size_ > 0, ValueError, "DataLoader: batch_size must be positive, got ",
             options_.batch_size_);
  set_epoch(0);
}

int64_t DataLoader::num_batches() const {
  int64_t n = size(), b = options_.batch_size_;
  return options_.drop_last_ ? n / b : (n + b - 1) / b;
}

std::vector<int32_t> shuffled_order(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  // Each epoch reads its own stretch of the stream, 2^32 blocks after the previous epoch's.
  uint64_t offset = static_cast<uint64_t>(epoch) << 32;
  for (int64_t i = n - 1; i > 0; --i) {
    uint64_t word = philox::word(seed, offset, static_cast<uint64_t>(i));
    // j uniform in [0, i] by multiply-and-shift (bias below n / 2^32, negligible here).
    auto j = static_cast<int64_t>((word * static_cast<uint64_t>(i + 1)) >> 32);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

void DataLoader::set_epoch(int64_t epoch) {
  std::vector<int32_t> order(static_cast<size_t>(size()));
  if (options_.shuffle_) order = shuffled_order(size(), options_.seed_, epoch);
  else std::iota(order.begin(), order.end(), 0);
  order_ = from_vector<int32_t>(order, {size()}, TensorOptions(DType::i32).device(inputs_.device()));
}

Batch DataLoader::batch(int64_t index) const {
  KILN_CHECK(index >= 0 && index < num_batches(), ValueError, "DataLoader: batch ", index,
             " of ", num_batches());
  int64_t begin = index * options_.batch_size_;
  int64_t end = std::min(begin + options_.batch_size_, size());
  Tensor picked = order_.slice(0, begin, end);
  return {index_select(inputs_, 0, picked), index_select(targets_, 0, picked)};
}

Tensor normalize_images(const Tensor& images, const Device& device, double mean, double stddev) {
  KILN_CHECK(images.dim() == 3 && images.dtype() == DType::u8, ShapeError,
             "normalize_images: expects u8 images [N, H, W], got ", images.dtype(), " ", images.shape());
  Tensor x = images.to(device).to(DType::f32);
  x = (x * (1.0 / (255.0 * stddev))) - mean / stddev;
  return x.unsqueeze(1);
}

}  // namespace kiln::data
