#include "kiln/datasets/loader.h"

#include <numeric>

#include "kiln/autograd/ops.h"
#include "kiln/core/backend.h"
#include "kiln/core/capture.h"
#include "kiln/core/philox.h"

namespace kiln::data {

namespace {

void check_shard(int64_t rank, int64_t num_shards, ShardTail tail) {
  KILN_CHECK(num_shards >= 1, ValueError, "shard: num_shards must be at least 1, got ", num_shards);
  KILN_CHECK(rank >= 0, ValueError, "shard: rank must be non-negative, got ", rank);
  KILN_CHECK(rank < num_shards, ValueError, "shard: rank ", rank, " is not below num_shards ",
             num_shards);
  KILN_CHECK(tail == ShardTail::pad || tail == ShardTail::drop || tail == ShardTail::uneven,
             ValueError, "shard_tail: not a ShardTail (", static_cast<int>(tail), ")");
}

}  // namespace

DataLoader::DataLoader(Tensor inputs, Tensor targets, DataLoaderOptions options)
    : inputs_(inputs.contiguous()), targets_(targets.contiguous()), options_(options) {
  KILN_CHECK(inputs_.dim() >= 1 && targets_.dim() >= 1 && inputs_.size(0) == targets_.size(0),
             ShapeError, "DataLoader: inputs ", inputs_.shape(), " and targets ", targets_.shape(),
             " must hold the same number of samples along axis 0");
  KILN_CHECK(inputs_.device() == targets_.device(), DeviceError, "DataLoader: inputs on ",
             inputs_.device(), ", targets on ", targets_.device());
  KILN_CHECK(options_.batch_size_ > 0, ValueError, "DataLoader: batch_size must be positive, got ",
             options_.batch_size_);
  check_shard(options_.shard_rank_, options_.num_shards_, options_.shard_tail_);
  set_epoch(0);
}

int64_t DataLoader::size() const {
  return shard_size(dataset_size(), options_.shard_rank_, options_.num_shards_, options_.shard_tail_);
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

int64_t shard_size(int64_t n, int64_t rank, int64_t num_shards, ShardTail tail) {
  check_shard(rank, num_shards, tail);
  KILN_CHECK(n >= 0, ValueError, "shard_size: negative sample count ", n);
  switch (tail) {
    case ShardTail::pad: return (n + num_shards - 1) / num_shards;
    case ShardTail::drop: return n / num_shards;
    case ShardTail::uneven: return (n - rank + num_shards - 1) / num_shards;  // 0 when rank >= n
  }
  return 0;  // unreachable: check_shard refused other values
}

std::vector<int32_t> shard_order(const std::vector<int32_t>& order, int64_t rank, int64_t num_shards,
                                 ShardTail tail) {
  auto n = static_cast<int64_t>(order.size());
  int64_t count = shard_size(n, rank, num_shards, tail);
  std::vector<int32_t> shard(static_cast<size_t>(count));
  // Position k of the shard is position rank + k * num_shards of the order, wrapped around for
  // pad (the only policy that reaches past n, and then n > 0 since count > 0).
  for (int64_t k = 0; k < count; ++k)
    shard[static_cast<size_t>(k)] = order[static_cast<size_t>((rank + k * num_shards) % n)];
  return shard;
}

void DataLoader::set_epoch(int64_t epoch) {
  int64_t n = dataset_size();
  std::vector<int32_t> order(static_cast<size_t>(n));
  if (options_.shuffle_) order = shuffled_order(n, options_.seed_, epoch);
  else std::iota(order.begin(), order.end(), 0);
  if (options_.num_shards_ > 1)
    order = shard_order(order, options_.shard_rank_, options_.num_shards_, options_.shard_tail_);
  auto count = static_cast<int64_t>(order.size());
  order_ = from_vector<int32_t>(order, {count}, TensorOptions(DType::i32).device(inputs_.device()));
}

namespace {

// t's rows: its first axis as the middle of the [outer, n, inner] view gather reads and writes.
TensorRef rows_of(const Tensor& t) {
  const int64_t n = t.size(0), inner = n > 0 ? t.numel() / n : 0;
  TensorRef ref = t.ref();
  ref.shape = Shape{1, n, inner};
  ref.strides = Strides{n * inner, inner, 1};
  return ref;
}

// `into` when it can take `m` rows of `data` as they are, else a new tensor for them.
Tensor rows_for(const Tensor& data, int64_t m, const Tensor& into) {
  Shape shape = data.shape();
  shape[0] = m;
  const bool fits = into.defined() && into.shape() == shape && into.dtype() == data.dtype() &&
                    into.device() == data.device() && into.is_contiguous();
  return fits ? into : empty(shape, TensorOptions(data.dtype()).device(data.device()));
}

}  // namespace

int64_t DataLoader::batch_rows(int64_t index) const {
  KILN_CHECK(index >= 0 && index < num_batches(), ValueError, "DataLoader: batch ", index,
             " of ", num_batches());
  const int64_t begin = index * options_.batch_size_;
  return std::min(options_.batch_size_, size() - begin);
}

Batch DataLoader::batch(int64_t index, const Batch& into) const {
  const int64_t begin = index * options_.batch_size_, rows = batch_rows(index);
  const Tensor picked = order_.slice(0, begin, begin + rows);
  Batch out{rows_for(inputs_, rows, into.inputs), rows_for(targets_, rows, into.targets)};
  const TensorRef from[] = {rows_of(inputs_), rows_of(targets_)}, to[] = {rows_of(out.inputs), rows_of(out.targets)};
  inputs_.backend().gather_many(from, picked.ref(), to);
  out.inputs.storage()->bump_version();  // written in place when they were `into`'s
  out.targets.storage()->bump_version();
  return out;
}

Batch DataLoader::batch_at(const int64_t* index, const Batch& into) const {
  Capture* capture = capturing(inputs_.device());
  if (!capture) return batch(*index, into);
  const int64_t rows = batch_rows(*index);
  Batch out{rows_for(inputs_, rows, into.inputs), rows_for(targets_, rows, into.targets)};
  // where the batch's indices start in the current order: order_ is a new tensor each epoch
  auto first = [this, index, rows] {
    KILN_CHECK(batch_rows(*index) == rows, ValueError, "DataLoader::batch_at: batch ", *index, " holds ",
               batch_rows(*index), " samples, but the step was captured on a batch of ", rows);
    return static_cast<const int32_t*>(order_.ref().address()) + *index * options_.batch_size_;
  };
  const int32_t* const* indices = capture->replay_value<const int32_t*>(first(), first);
  const TensorRef from[] = {rows_of(inputs_), rows_of(targets_)}, to[] = {rows_of(out.inputs), rows_of(out.targets)};
  inputs_.backend().gather_many_indirect(from, indices, rows, to);
  out.inputs.storage()->bump_version();
  out.targets.storage()->bump_version();
  return out;
}

Tensor normalize_images(const Tensor& images, const Device& device, double mean, double stddev) {
  KILN_CHECK(images.dim() == 3 && images.dtype() == DType::u8, ShapeError,
             "normalize_images: expects u8 images [N, H, W], got ", images.dtype(), " ", images.shape());
  Tensor x = images.to(device).to(DType::f32);
  x = (x * (1.0 / (255.0 * stddev))) - mean / stddev;
  return x.unsqueeze(1);
}

}  // namespace kiln::data
