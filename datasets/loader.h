// DataLoader: a whole data set held on the training device, served in batches.
//
// The inputs and targets are uploaded once; each epoch draws a permutation (a Fisher-Yates
// shuffle driven by the Philox stream of (seed, epoch), so every backend and every rerun sees
// the same order) and uploads it, 4 bytes a sample; each batch is then gathered on the device
// with index_select. No host round trip per batch.
//
//   data::DataLoader train(images, labels, data::DataLoaderOptions().batch_size(64).seed(1));
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     train.set_epoch(epoch);
//     for (const data::Batch& b : train) { ... b.inputs, b.targets ... }
//   }
//
// Data-parallel training (one process a GPU, `mpirun -np S`, gradients averaged every step)
// gives each rank its shard of the epoch's order, as PyTorch's DistributedSampler: every rank
// draws the same permutation (the same seed on every rank!) and shard r takes the positions
// r, r + S, r + 2S, ... of it. Batch i of every shard together is then batch i of one process with
// batch size B * S, so S ranks at batch size B train as one process on the global batch. Only the
// shard's part of the order is uploaded; size() and num_batches() count the shard.
//
//   // mpirun -np 4 ./train
//   std::shared_ptr<ProcessGroup> group = init_process_group(DeviceType::cuda);
//   int64_t rank = group->rank(), size = group->size();
//   data::DataLoader train(images, labels,   // 64 a rank, 256 a step; tail: pad
//                          data::DataLoaderOptions().batch_size(64).seed(1).shard(rank, size));
//   data::DataLoader test(test_images, test_labels,
//                         data::DataLoaderOptions().batch_size(1000).shuffle(false)
//                             .shard(rank, size).shard_tail(data::ShardTail::uneven));
//
// When N is not a multiple of S, shard_tail chooses what happens to the tail:
//   pad     (default; DistributedSampler's drop_last=False) the order is extended by repeating its
//           start (cyclically, when N < S) to a multiple of S: every shard holds ceil(N / S)
//           samples, and the first (S - N mod S) mod S samples of the epoch's order are seen twice
//           that epoch (on two ranks; more often when N < S).
//   drop    the last N mod S samples of the epoch's order are left out: every shard holds
//           floor(N / S) (none at all when N < S).
//   uneven  nothing padded or dropped: the shards partition the data set exactly and differ in
//           size by at most one (the first N mod S shards hold one more). For evaluation, where
//           sums and counts are reduced across ranks and every sample must count once; not for
//           training, where ranks with fewer batches would stop calling the collectives early.
// drop_last still applies to the shard's last batch (smaller than batch_size) on each rank; with
// pad or drop every shard has the same number of batches.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::data {

// What happens to the N mod S samples at the end of a sharded epoch (the header comment says more).
enum class ShardTail { pad, drop, uneven };

struct DataLoaderOptions {
  DataLoaderOptions& batch_size(int64_t v) { batch_size_ = v; return *this; }
  DataLoaderOptions& shuffle(bool v) { shuffle_ = v; return *this; }
  DataLoaderOptions& drop_last(bool v) { drop_last_ = v; return *this; }
  DataLoaderOptions& seed(uint64_t v) { seed_ = v; return *this; }
  // This process serves shard `rank` of `num_shards` (0 <= rank < num_shards; 0 of 1: unsharded).
  DataLoaderOptions& shard(int64_t rank, int64_t num_shards) {
    shard_rank_ = rank;
    num_shards_ = num_shards;
    return *this;
  }
  DataLoaderOptions& shard_tail(ShardTail v) { shard_tail_ = v; return *this; }
  int64_t batch_size_ = 64;
  bool shuffle_ = true;
  bool drop_last_ = false;  // drop a last batch smaller than batch_size
  uint64_t seed_ = 0;       // must be the same on every shard
  int64_t shard_rank_ = 0;
  int64_t num_shards_ = 1;
  ShardTail shard_tail_ = ShardTail::pad;
};

struct Batch {
  Tensor inputs;   // [B, ...] on the loader's device
  Tensor targets;  // [B]
};

class DataLoader {
 public:
  // inputs [N, ...] and targets [N] on one device. The loader keeps handles, not copies (of a
  // strided one, a contiguous copy).
  DataLoader(Tensor inputs, Tensor targets, DataLoaderOptions options = {});

  // Samples an epoch of this shard serves (the whole data set when unsharded; see ShardTail).
  int64_t size() const;
  int64_t dataset_size() const { return inputs_.size(0); }  // samples of the whole data set
  int64_t num_batches() const;  // of this shard, batches of batch_size (drop_last applied)
  int64_t batch_size() const { return options_.batch_size_; }
  // Chooses the sample order of `epoch` (without shuffling: 0, 1, ..., N - 1), then this shard's
  // part of it.
  void set_epoch(int64_t epoch);
  // Batch `index` of the current epoch, inputs and targets gathered in one backend call (one launch
  // on CUDA). Into `into`'s tensors where they have the batch's shapes and the data's dtypes and
  // device and are contiguous (a captured step's own inputs: CapturedStep::inputs_like, so that
  // the step copies nothing), else into new ones.
  Batch batch(int64_t index, const Batch& into = {}) const;
  // Batch `*index`, as a captured step's own work: gathered into `into` (the step's inputs), and at
  // every replay from the batch that `*index` names then, whose place in the order the device reads
  // (a replay value, core/capture.h), so that each replay loads its own batch and nothing runs
  // between replays. `*index` and this loader must outlive the graph, and `*index` must name at each
  // replay a batch of the rows it named at the capture (CapturedStep keeps a graph per batch shape).
  // Outside a capture, batch(*index, into).
  Batch batch_at(const int64_t* index, const Batch& into) const;
  int64_t batch_rows(int64_t index) const;  // samples in batch `index` (the last may have fewer)

  class iterator {
   public:
    iterator(const DataLoader* loader, int64_t index) : loader_(loader), index_(index) {}
    Batch operator*() const { return loader_->batch(index_); }
    iterator& operator++() { ++index_; return *this; }
    bool operator!=(const iterator& other) const { return index_ != other.index_; }

   private:
    const DataLoader* loader_;
    int64_t index_;
  };
  iterator begin() const { return {this, 0}; }
  iterator end() const { return {this, num_batches()}; }

 private:
  Tensor inputs_, targets_;
  DataLoaderOptions options_;
  Tensor order_;  // i32 [size()] on the device: this shard's part of the current epoch's order
};

// The sample order of `epoch`: a permutation of [0, n) drawn from Philox(seed) on the host.
std::vector<int32_t> shuffled_order(int64_t n, uint64_t seed, int64_t epoch);

// Shard `rank` of `num_shards` of an epoch's order (of N samples): its positions rank,
// rank + num_shards, rank + 2 num_shards, ... after `tail` pads or cuts the order (ShardTail).
// ValueError unless 0 <= rank < num_shards.
std::vector<int32_t> shard_order(const std::vector<int32_t>& order, int64_t rank, int64_t num_shards,
                                 ShardTail tail);
// The length of that shard: ceil(N / S) (pad), floor(N / S) (drop), ceil((N - rank) / S) (uneven).
int64_t shard_size(int64_t n, int64_t rank, int64_t num_shards, ShardTail tail);

// u8 images [N, H, W] -> f32 [N, 1, H, W] scaled to [0, 1] and normalised ((x - mean) / stddev;
// MNIST's 0.1307 and 0.3081 by default, as PyTorch's example), on `device`.
Tensor normalize_images(const Tensor& images, const Device& device, double mean = 0.1307,
                        double stddev = 0.3081);

}  // namespace kiln::data
