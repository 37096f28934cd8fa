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
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln::data {

struct DataLoaderOptions {
  DataLoaderOptions& batch_size(int64_t v) { batch_size_ = v; return *this; }
  DataLoaderOptions& shuffle(bool v) { shuffle_ = v; return *this; }
  DataLoaderOptions& drop_last(bool v) { drop_last_ = v; return *this; }
  DataLoaderOptions& seed(uint64_t v) { seed_ = v; return *this; }
  int64_t batch_size_ = 64;
  bool shuffle_ = true;
  bool drop_last_ = false;  // drop a last batch smaller than batch_size
  uint64_t seed_ = 0;
};

struct Batch {
  Tensor inputs;   // [B, ...] on the loader's device
  Tensor targets;  // [B]
};

class DataLoader {
 public:
  // inputs [N, ...] and targets [N] on one device. The loader keeps handles, not copies.
  DataLoader(Tensor inputs, Tensor targets, DataLoaderOptions options = {});

  int64_t size() const { return inputs_.size(0); }  // samples
  int64_t num_batches() const;
  int64_t batch_size() const { return options_.batch_size_; }
  // Chooses the sample order of `epoch` (without shuffling: 0, 1, ..., N - 1).
  void set_epoch(int64_t epoch);
  Batch batch(int64_t index) const;  // batch `index` of the current epoch

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
  Tensor order_;  // i32 [N] on the device: the current epoch's permutation
};

// The sample order of `epoch`: a permutation of [0, n) drawn from Philox(seed) on the host.
std::vector<int32_t> shuffled_order(int64_t n, uint64_t seed, int64_t epoch);

// u8 images [N, H, W] -> f32 [N, 1, H, W] scaled to [0, 1] and normalised ((x - mean) / stddev;
// MNIST's 0.1307 and 0.3081 by default, as PyTorch's example), on `device`.
Tensor normalize_images(const Tensor& images, const Device& device, double mean = 0.1307,
                        double stddev = 0.3081);

}  // namespace kiln::data
