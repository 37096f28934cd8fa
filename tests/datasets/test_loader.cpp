// DataLoader: seeded shuffles, batch sizes, drop_last, batches gathered from the right rows, and
// the shards of data-parallel training (each rank its part of the epoch's order).
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>

#include "kiln/core/backend.h"
#include "kiln/datasets/loader.h"
#include "kiln/kiln.h"

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
  CHECK(loader.batch_rows(0) == 4);
  CHECK(loader.batch_rows(2) == 2);
  CHECK_THROWS_WITH_AS(loader.batch_rows(3), doctest::Contains("batch 3 of 3"), ValueError);
  // outside a capture batch_at is batch(*index), into `into` where the shapes fit
  int64_t index = 1;
  const data::Batch into{zeros({4, 3}), zeros({4}, DType::i32)};
  const data::Batch at = ordered.batch_at(&index, into);
  CHECK(at.targets.to_vector<int32_t>() == std::vector<int32_t>{4, 5, 6, 7});
  CHECK(at.inputs.storage() == into.inputs.storage());
  CHECK(into.inputs.to_vector<float>() == ordered.batch(1).inputs.to_vector<float>());
  index = 2;
  CHECK(ordered.batch_at(&index, into).targets.to_vector<int32_t>() == std::vector<int32_t>{8, 9});
  // a backend that does not capture has no gather at an address the device holds
  const int32_t* const* nowhere = nullptr;
  CHECK_THROWS_WITH_AS(inputs.backend().gather_many_indirect({}, nowhere, 0, {}),
                       doctest::Contains("the cpu backend does not gather from indices whose address"),
                       BackendUnavailable);
  CHECK_THROWS_AS(data::DataLoader(inputs, targets.slice(0, 0, 5)), ShapeError);
  CHECK_THROWS_AS(data::DataLoader(inputs, targets, data::DataLoaderOptions().batch_size(0)), ValueError);
}

namespace {

const data::ShardTail kTails[] = {data::ShardTail::pad, data::ShardTail::drop, data::ShardTail::uneven};

std::vector<int32_t> sorted(std::vector<int32_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// The shards put back together: shard r's k-th sample at position r + k * S (-1 where none is).
std::vector<int32_t> interleave(const std::vector<std::vector<int32_t>>& shards) {
  auto s = static_cast<int64_t>(shards.size());
  size_t total = 0;
  for (const auto& shard : shards) total += shard.size();
  std::vector<int32_t> merged(total, -1);
  for (int64_t r = 0; r < s; ++r)
    for (size_t k = 0; k < shards[static_cast<size_t>(r)].size(); ++k) {
      auto pos = static_cast<size_t>(r + static_cast<int64_t>(k) * s);
      REQUIRE(pos < total);
      CHECK(merged[pos] == -1);
      merged[pos] = shards[static_cast<size_t>(r)][k];
    }
  return merged;
}

// The targets (= sample indices) of a loader's batch `index`, and its rows checked against them.
std::vector<int32_t> batch_samples(const data::DataLoader& loader, int64_t index) {
  data::Batch b = loader.batch(index);
  std::vector<int32_t> t = b.targets.to_vector<int32_t>();
  std::vector<float> x = b.inputs.to_vector<float>();
  REQUIRE(x.size() == 2 * t.size());
  for (size_t i = 0; i < t.size(); ++i) CHECK(x[2 * i] == static_cast<float>(2 * t[i]));
  return t;
}

// Inputs [n, 2] (row i: 2i, 2i + 1) and targets [n] (i): every target names its sample.
struct Samples {
  explicit Samples(int64_t n)
      : inputs(arange(0, static_cast<double>(2 * n)).reshape({n, 2})),
        targets(arange(0, static_cast<double>(n), 1, DType::i32)) {}
  Tensor inputs, targets;
};

}  // namespace

TEST_CASE("shards partition the epoch's order under each tail policy") {
  for (int64_t s : {1, 2, 3, 7})
    for (int64_t n : {1, 5, 10, 11, 100})
      for (data::ShardTail tail : kTails) {
        CAPTURE(s);
        CAPTURE(n);
        CAPTURE(static_cast<int>(tail));
        std::vector<int32_t> order = data::shuffled_order(n, 5, 2);
        std::vector<std::vector<int32_t>> shards;
        for (int64_t r = 0; r < s; ++r) {
          shards.push_back(data::shard_order(order, r, s, tail));
          CHECK(static_cast<int64_t>(shards.back().size()) == data::shard_size(n, r, s, tail));
        }
        std::vector<int32_t> merged = interleave(shards);  // checks no position is taken twice
        if (tail == data::ShardTail::pad) {
          // Equal sizes; the order extended by its own start (cyclically when n < s).
          for (const auto& shard : shards) CHECK(static_cast<int64_t>(shard.size()) == (n + s - 1) / s);
          REQUIRE(static_cast<int64_t>(merged.size()) == s * ((n + s - 1) / s));
          for (size_t i = 0; i < merged.size(); ++i) CHECK(merged[i] == order[i % order.size()]);
        } else if (tail == data::ShardTail::drop) {
          // Equal sizes; exactly the last n mod s of the order left out, nothing seen twice.
          for (const auto& shard : shards) CHECK(static_cast<int64_t>(shard.size()) == n / s);
          CHECK(merged == std::vector<int32_t>(order.begin(), order.end() - n % s));
        } else {
          // An exact partition, sizes within one of each other.
          for (const auto& shard : shards) {
            CHECK(static_cast<int64_t>(shard.size()) >= n / s);
            CHECK(static_cast<int64_t>(shard.size()) <= (n + s - 1) / s);
          }
          CHECK(merged == order);
          CHECK(sorted(merged) == sorted(order));
        }
      }
  // Unsharded, the shard is the order itself under every policy.
  std::vector<int32_t> order = data::shuffled_order(11, 1, 0);
  for (data::ShardTail tail : kTails) CHECK(data::shard_order(order, 0, 1, tail) == order);
  CHECK(data::shard_order({}, 1, 2, data::ShardTail::pad).empty());
}

TEST_CASE("every rank's loader shares one order per epoch, and epochs differ") {
  int64_t n = 60, s = 3;
  Samples samples(n);
  auto options = [&](int64_t r) { return data::DataLoaderOptions().batch_size(7).seed(9).shard(r, s); };
  for (int64_t epoch : {0, 1, 4}) {
    std::vector<std::vector<int32_t>> shards;
    for (int64_t r = 0; r < s; ++r) {
      data::DataLoader rank(samples.inputs, samples.targets, options(r));
      data::DataLoader again(samples.inputs, samples.targets, options(r));  // another run of rank r
      rank.set_epoch(epoch);
      again.set_epoch(epoch);
      CHECK(rank.size() == 20);
      CHECK(rank.dataset_size() == 60);
      CHECK(rank.num_batches() == 3);
      std::vector<int32_t> shard;
      for (int64_t i = 0; i < rank.num_batches(); ++i) {
        std::vector<int32_t> t = batch_samples(rank, i);
        CHECK(batch_samples(again, i) == t);
        shard.insert(shard.end(), t.begin(), t.end());
      }
      shards.push_back(shard);
    }
    // The ranks' shards are the interleaved parts of one permutation, the epoch's.
    CHECK(interleave(shards) == data::shuffled_order(n, 9, epoch));
  }
  data::DataLoader rank1(samples.inputs, samples.targets, options(1));
  std::vector<int32_t> epoch0 = batch_samples(rank1, 0);
  rank1.set_epoch(1);
  CHECK(batch_samples(rank1, 0) != epoch0);
  rank1.set_epoch(0);
  CHECK(batch_samples(rank1, 0) == epoch0);
}

namespace {

// Batch i of the S shards at batch size B, together, against batch i of one loader at B * S.
void check_global_batches(int64_t n, int64_t s, int64_t b, data::ShardTail tail, bool shuffle) {
  CAPTURE(n);
  CAPTURE(s);
  CAPTURE(b);
  CAPTURE(static_cast<int>(tail));
  Samples samples(n);
  data::DataLoader global(samples.inputs, samples.targets,
                          data::DataLoaderOptions().batch_size(b * s).seed(21).shuffle(shuffle));
  std::vector<data::DataLoader> ranks;
  for (int64_t r = 0; r < s; ++r)
    ranks.emplace_back(samples.inputs, samples.targets,
                       data::DataLoaderOptions().batch_size(b).seed(21).shuffle(shuffle).shard(r, s).shard_tail(tail));
  int64_t sharded_length = 0;  // the padded or cut order's length
  for (const data::DataLoader& rank : ranks) sharded_length += rank.size();
  for (int64_t epoch : {0, 3}) {
    global.set_epoch(epoch);
    for (data::DataLoader& rank : ranks) rank.set_epoch(epoch);
    // Batches that lie wholly within both the data set and the padded or cut order.
    int64_t whole = std::min(n, sharded_length) / (b * s);
    for (int64_t i = 0; i < whole; ++i) {
      std::vector<int32_t> together;
      for (const data::DataLoader& rank : ranks) {
        std::vector<int32_t> t = batch_samples(rank, i);
        CHECK(static_cast<int64_t>(t.size()) == b);
        together.insert(together.end(), t.begin(), t.end());
      }
      CHECK(sorted(together) == sorted(batch_samples(global, i)));
    }
    std::vector<int32_t> order = data::shuffled_order(n, 21, epoch);
    if (!shuffle) std::iota(order.begin(), order.end(), 0);
    // The rest: pad serves the last global batch and the order's start again; drop leaves the last
    // n mod s out; uneven serves the last global batch exactly, from the shards that reach it.
    for (int64_t i = whole; i < global.num_batches(); ++i) {
      std::vector<int32_t> together;
      for (const data::DataLoader& rank : ranks)
        if (i < rank.num_batches()) {
          std::vector<int32_t> t = batch_samples(rank, i);
          together.insert(together.end(), t.begin(), t.end());
        }
      std::vector<int32_t> expected = batch_samples(global, i);
      if (tail == data::ShardTail::pad)
        expected.insert(expected.end(), order.begin(), order.begin() + (sharded_length - n));
      if (tail == data::ShardTail::drop) expected.resize(expected.size() - static_cast<size_t>(n % s));
      CHECK(sorted(together) == sorted(expected));
    }
    for (const data::DataLoader& rank : ranks) CHECK(rank.num_batches() <= global.num_batches());
  }
}

}  // namespace

TEST_CASE("batch i of every shard together is batch i of one loader at batch_size B * S") {
  for (data::ShardTail tail : kTails) {
    check_global_batches(96, 3, 4, tail, true);  // 96 = 8 * 12: every batch whole
    check_global_batches(96, 3, 4, tail, false);
    check_global_batches(64, 1, 8, tail, true);
  }
  check_global_batches(94, 3, 4, data::ShardTail::pad, true);     // padded to 96: 2 seen twice
  check_global_batches(98, 3, 4, data::ShardTail::drop, true);    // cut to 96
  check_global_batches(98, 3, 4, data::ShardTail::uneven, true);  // shards of 33, 33, 32
  check_global_batches(101, 4, 5, data::ShardTail::uneven, false);
  // Tails that do not fill a global batch, and fewer samples than shards.
  check_global_batches(100, 3, 4, data::ShardTail::pad, true);
  check_global_batches(100, 3, 4, data::ShardTail::drop, true);
  check_global_batches(13, 7, 1, data::ShardTail::pad, true);
  for (data::ShardTail tail : kTails) check_global_batches(5, 7, 2, tail, true);

  // Without shuffling, shard r serves r, r + S, r + 2S, ...
  Samples samples(24);
  data::DataLoader rank1(samples.inputs, samples.targets,
                         data::DataLoaderOptions().batch_size(3).shuffle(false).shard(1, 2));
  CHECK(batch_samples(rank1, 0) == std::vector<int32_t>{1, 3, 5});
  CHECK(batch_samples(rank1, 1) == std::vector<int32_t>{7, 9, 11});
}

TEST_CASE("shard sizes, drop_last on the shard, and fewer samples than shards") {
  Samples ten(10);
  data::DataLoader dropping(ten.inputs, ten.targets,
                            data::DataLoaderOptions().batch_size(3).drop_last(true).shard(1, 2));
  CHECK(dropping.size() == 5);
  CHECK(dropping.dataset_size() == 10);
  CHECK(dropping.num_batches() == 1);  // 5 samples: one batch of 3, the 2 left dropped
  data::DataLoader keeping(ten.inputs, ten.targets, data::DataLoaderOptions().batch_size(3).shard(1, 2));
  CHECK(keeping.num_batches() == 2);
  CHECK(keeping.batch(1).targets.numel() == 2);
  data::DataLoader padded(ten.inputs, ten.targets, data::DataLoaderOptions().batch_size(4).shard(2, 3));
  CHECK(padded.size() == 4);  // ceil(10 / 3)
  CHECK(padded.num_batches() == 1);

  int64_t n = 3, s = 5;
  Samples three(n);
  std::vector<int32_t> order = data::shuffled_order(n, 4, 0);
  auto loader = [&](int64_t r, data::ShardTail tail) {
    return data::DataLoader(three.inputs, three.targets,
                            data::DataLoaderOptions().batch_size(2).seed(4).shard(r, s).shard_tail(tail));
  };
  // pad: one sample each, the order repeated: order[r mod 3].
  std::vector<int32_t> seen;
  for (int64_t r = 0; r < s; ++r) {
    data::DataLoader l = loader(r, data::ShardTail::pad);
    CHECK(l.size() == 1);
    CHECK(l.num_batches() == 1);
    std::vector<int32_t> t = batch_samples(l, 0);
    CHECK(t == std::vector<int32_t>{order[static_cast<size_t>(r % n)]});
    seen.insert(seen.end(), t.begin(), t.end());
  }
  CHECK(sorted(seen) == sorted({order[0], order[0], order[1], order[1], order[2]}));
  // drop: every shard empty, so no batch.
  for (int64_t r = 0; r < s; ++r) {
    data::DataLoader l = loader(r, data::ShardTail::drop);
    CHECK(l.size() == 0);
    CHECK(l.num_batches() == 0);
    CHECK(!(l.begin() != l.end()));
    CHECK_THROWS_AS(l.batch(0), ValueError);
  }
  // uneven: shards 0..2 one sample each, 3 and 4 empty.
  seen.clear();
  for (int64_t r = 0; r < s; ++r) {
    data::DataLoader l = loader(r, data::ShardTail::uneven);
    CHECK(l.size() == (r < n ? 1 : 0));
    CHECK(l.num_batches() == (r < n ? 1 : 0));
    for (const data::Batch& b : l) {
      std::vector<int32_t> t = b.targets.to_vector<int32_t>();
      seen.insert(seen.end(), t.begin(), t.end());
    }
  }
  CHECK(sorted(seen) == std::vector<int32_t>{0, 1, 2});
}

TEST_CASE("bad shard options are refused, naming the rule") {
  Samples samples(10);
  auto make = [&](data::DataLoaderOptions options) { data::DataLoader l(samples.inputs, samples.targets, options); };
  CHECK_THROWS_WITH_AS(make(data::DataLoaderOptions().shard(3, 3)),
                       doctest::Contains("shard: rank 3 is not below num_shards 3"), ValueError);
  CHECK_THROWS_WITH_AS(make(data::DataLoaderOptions().shard(0, 0)),
                       doctest::Contains("num_shards must be at least 1, got 0"), ValueError);
  CHECK_THROWS_WITH_AS(make(data::DataLoaderOptions().shard(-1, 4)),
                       doctest::Contains("rank must be non-negative, got -1"), ValueError);
  CHECK_THROWS_WITH_AS(make(data::DataLoaderOptions().shard_tail(static_cast<data::ShardTail>(7))),
                       doctest::Contains("not a ShardTail"), ValueError);
  std::vector<int32_t> order = data::shuffled_order(10, 0, 0);
  CHECK_THROWS_WITH_AS(data::shard_order(order, 2, 2, data::ShardTail::pad),
                       doctest::Contains("rank 2 is not below num_shards 2"), ValueError);
  CHECK_THROWS_AS(data::shard_order(order, 0, -2, data::ShardTail::drop), ValueError);
  CHECK_THROWS_AS(data::shard_size(10, 5, 5, data::ShardTail::uneven), ValueError);
  CHECK_NOTHROW(make(data::DataLoaderOptions().shard(2, 3).shard_tail(data::ShardTail::drop)));
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
