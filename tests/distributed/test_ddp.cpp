// DistributedDataParallel on every rank of the job, against one process training the same model
// on the global batch (the union of the ranks' batches), computed by each rank on its own.
// CPU (MPI): f64, equal to 1e-12 relative; CUDA (NCCL): f32, to 1e-5 (sums in other orders).
// A captured data-parallel step (optim::CapturedStep, its all-reduces in the graph) against the
// eager one: the same bits on up to two ranks (CUDA); the CPU group refuses to capture.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/backend.h"
#include "kiln/kiln.h"
#include "tests/distributed/distributed.h"

namespace {

using namespace kiln;
using kiln::test::group;
using kiln::test::group_ptr;

DType dtype() { return group().device().is_cpu() ? DType::f64 : DType::f32; }
double tolerance() { return group().device().is_cpu() ? 1e-12 : 1e-5; }

std::shared_ptr<nn::Sequential> make_net(int64_t hidden = 16) {
  auto net = std::make_shared<nn::Sequential>(nn::Linear(6, hidden), nn::ReLU(), nn::Linear(hidden, hidden),
                                              nn::ReLU(), nn::Linear(hidden, 3));
  net->to(dtype());
  net->to(group().device());
  return net;
}

// The global batch of step `step`: the same on every rank (a fixed seed), rows [G, 6] and targets [G, 3].
std::pair<Tensor, Tensor> global_batch(int64_t rows, int step) {
  TensorOptions o = TensorOptions(dtype()).device(group().device());
  Generator g(1000 + static_cast<uint64_t>(step));
  Tensor x = uniform({rows, 6}, -1.0, 1.0, o, &g);
  Tensor y = uniform({rows, 3}, -1.0, 1.0, o, &g);
  return {x, y};
}

// This rank's rows of the global batch.
Tensor my_rows(const Tensor& t) {
  int64_t per = t.size(0) / group().size();
  return t.slice(0, group().rank() * per, (group().rank() + 1) * per);
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]) / (std::abs(y[i]) + 1e-3));
  return worst;
}

void check_same_weights(nn::Module& a, nn::Module& b) {
  NamedTensors pa = a.named_parameters(), pb = b.named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    CAPTURE(pa[i].first);
    CHECK(max_rel_diff(pa[i].second, pb[i].second) <= tolerance());
  }
}

}  // namespace

TEST_CASE("DistributedDataParallel: rank 0's weights everywhere at construction") {
  manual_seed(7 + static_cast<uint64_t>(group().rank()));  // every rank initialises differently
  auto net = make_net();
  nn::DistributedDataParallel ddp(net, group_ptr());
  for (const Tensor& p : net->parameters()) {
    Shape shape = p.shape();
    shape.insert(0, group().size());
    Tensor gathered = zeros(shape, TensorOptions(p.dtype()).device(p.device()));
    group().all_gather(p.detach().contiguous(), gathered);
    for (int r = 1; r < group().size(); ++r) CHECK(max_rel_diff(gathered.slice(0, r, r + 1), gathered.slice(0, 0, 1)) == 0);
  }
  nn::StateDict state = ddp.state_dict();
  CHECK(state.front().first == "module.0.weight");
}

TEST_CASE("DistributedDataParallel: weights after several SGD steps equal one process on the global batch") {
  struct Layout {
    double bucket_mb;
    size_t buckets;
  };
  // Parameters in reverse order, bytes in f32 (f64: twice): 3 x 4, 48 x 4, 16 x 4, 256 x 4, 16 x 4, 96 x 4.
  for (Layout layout : {Layout{25, 1},       // one bucket
                        Layout{1e-9, 6},     // a bucket for each parameter
                        Layout{0.0009, 2}}) { // 943 bytes: closed by the 16 x 16 weight, then the first layer
    CAPTURE(layout.bucket_mb);
    manual_seed(3);
    auto net = make_net();
    auto reference = make_net();
    reference->load_state_dict(net->state_dict());
    nn::DistributedDataParallel ddp(net, group_ptr(),
                                    nn::DistributedDataParallelOptions().bucket_cap_mb(layout.bucket_mb));
    CHECK(ddp.buckets().size() == layout.buckets);
    optim::SGD opt(ddp.parameters(), optim::SGDOptions(0.05).momentum(0.9));
    optim::SGD ref_opt(reference->parameters(), optim::SGDOptions(0.05).momentum(0.9));
    const int64_t per_rank = 5;
    for (int step = 0; step < 6; ++step) {
      auto [x, y] = global_batch(per_rank * group().size(), step);
      opt.zero_grad();
      mse_loss(ddp.forward(my_rows(x)), my_rows(y)).backward();
      opt.step();
      ref_opt.zero_grad();
      mse_loss(reference->forward(x), y).backward();
      ref_opt.step();
    }
    check_same_weights(*net, *reference);
  }
}

TEST_CASE("DistributedDataParallel: no_sync accumulates locally, the next backward averages the sum") {
  for (double bucket_mb : {25.0, 1e-9}) {  // one bucket; one for each parameter
    CAPTURE(bucket_mb);
    manual_seed(5);
    auto net = make_net();
    auto reference = make_net();
    reference->load_state_dict(net->state_dict());
    nn::DistributedDataParallel ddp(net, group_ptr(), nn::DistributedDataParallelOptions().bucket_cap_mb(bucket_mb));
    const int64_t per_rank = 4;
    auto [x1, y1] = global_batch(per_rank * group().size(), 1);
    auto [x2, y2] = global_batch(per_rank * group().size(), 2);
    auto [x3, y3] = global_batch(per_rank * group().size(), 3);
    auto check_grads = [&] {
      NamedTensors got = net->named_parameters(), want = reference->named_parameters();
      for (size_t i = 0; i < got.size(); ++i) {
        CAPTURE(got[i].first);
        CHECK(max_rel_diff(got[i].second.grad(), want[i].second.grad()) <= tolerance());
      }
    };
    {
      auto guard = ddp.no_sync();
      mse_loss(ddp.forward(my_rows(x1)), my_rows(y1)).backward();
    }
    // inside no_sync nothing was averaged: the gradient is this rank's own
    mse_loss(ddp.forward(my_rows(x2)), my_rows(y2)).backward();
    mse_loss(reference->forward(x1), y1).backward();
    mse_loss(reference->forward(x2), y2).backward();
    check_grads();
    // without zero_grad, the next synchronised backward adds to the averaged gradients
    mse_loss(ddp.forward(my_rows(x3)), my_rows(y3)).backward();
    mse_loss(reference->forward(x3), y3).backward();
    check_grads();
  }
}

TEST_CASE("DistributedDataParallel: ranks with different models are refused on every rank") {
  if (group().size() < 2) return;
  auto net = make_net(group().rank() == 1 ? 12 : 16);
  try {
    nn::DistributedDataParallel ddp(net, group_ptr());
    FAIL("different models were accepted");
  } catch (const DistributedError& e) {
    std::string what = e.what();
    CHECK(what.find("rank 0 has 0.weight [16, 6] ") != std::string::npos);
    CHECK(what.find("rank 1 has 0.weight [12, 6] ") != std::string::npos);
  }
  // different options too
  auto same = make_net();
  CHECK_THROWS_AS(nn::DistributedDataParallel(same, group_ptr(),
                                              nn::DistributedDataParallelOptions().bucket_cap_mb(group().rank() + 1)),
                  DistributedError);
}

namespace {
// Uses its second layer only when `use_extra`.
struct Branchy : nn::Module {
  Branchy() {
    a = register_module("a", std::make_shared<nn::Linear>(6, 3));
    extra = register_module("extra", std::make_shared<nn::Linear>(3, 3));
    to(dtype());
    to(group().device());
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = a->forward(x);
    return use_extra ? extra->forward(h) : h;
  }
  std::shared_ptr<nn::Linear> a, extra;
  bool use_extra = false;
};
}  // namespace

TEST_CASE("DistributedDataParallel: parameters outside the loss") {
  auto [x, y] = global_batch(2 * group().size(), 0);
  SUBCASE("are an error without find_unused_parameters") {
    auto net = std::make_shared<Branchy>();
    nn::DistributedDataParallel ddp(net, group_ptr());
    CHECK_THROWS_WITH_AS(mse_loss(ddp.forward(my_rows(x)), my_rows(y)).backward(),
                         doctest::Contains("no gradient reached extra.weight, extra.bias"), AutogradError);
  }
  SUBCASE("unused on every rank: no gradient, as in one process; used on rank 0 only: averaged with zeros") {
    for (double bucket_mb : {25.0, 1e-9}) {  // one bucket; one for each parameter
      CAPTURE(bucket_mb);
      auto net = std::make_shared<Branchy>();
      nn::DistributedDataParallel ddp(
          net, group_ptr(), nn::DistributedDataParallelOptions().find_unused_parameters(true).bucket_cap_mb(bucket_mb));
      mse_loss(ddp.forward(my_rows(x)), my_rows(y)).backward();
      CHECK_FALSE(net->extra->weight.grad().defined());
      CHECK(net->a->weight.grad().defined());
      net->zero_grad();
      net->use_extra = group().rank() == 0;
      mse_loss(ddp.forward(my_rows(x)), my_rows(y)).backward();
      REQUIRE(net->extra->weight.grad().defined());
      // rank 0's own gradient of extra, computed alone, divided by the number of ranks
      auto alone = std::make_shared<Branchy>();
      alone->load_state_dict(net->state_dict());
      alone->use_extra = true;
      auto rows0 = x.slice(0, 0, 2);
      mse_loss(alone->forward(rows0), y.slice(0, 0, 2)).backward();
      Tensor want = alone->extra->weight.grad() * (1.0 / group().size());
      CHECK(max_rel_diff(net->extra->weight.grad(), want) <= tolerance());
    }
  }
  SUBCASE("unused in the synchronised backward, used under no_sync: the accumulated gradient is averaged") {
    for (double bucket_mb : {25.0, 1e-9}) {
      CAPTURE(bucket_mb);
      auto net = std::make_shared<Branchy>();
      nn::DistributedDataParallel ddp(
          net, group_ptr(), nn::DistributedDataParallelOptions().find_unused_parameters(true).bucket_cap_mb(bucket_mb));
      auto alone = std::make_shared<Branchy>();
      alone->load_state_dict(net->state_dict());
      {
        auto guard = ddp.no_sync();
        net->use_extra = true;
        mse_loss(ddp.forward(my_rows(x)), my_rows(y)).backward();
      }
      net->use_extra = false;
      mse_loss(ddp.forward(my_rows(x)), my_rows(y)).backward();
      REQUIRE(net->extra->weight.grad().defined());
      // every rank's own gradient of extra from the first backward, averaged: one process on the global batch
      alone->use_extra = true;
      mse_loss(alone->forward(x), y).backward();
      CHECK(max_rel_diff(net->extra->weight.grad(), alone->extra->weight.grad()) <= tolerance());
    }
  }
}

namespace {

struct StepRun {
  std::vector<float> losses;  // this rank's, each step's
  std::vector<std::vector<float>> params;
  size_t graphs = 0;
};

// Trains a net with dropout through DDP for steps of these per-rank batch sizes, eagerly or as a
// CapturedStep: Adam, a StepLR stepped after every step, dropout's masks drawn from the default
// generator seeded alike in both runs (and differently on each rank).
StepRun train_ddp(const std::vector<int64_t>& batches, double bucket_mb, bool captured) {
  manual_seed(3);
  auto net = std::make_shared<nn::Sequential>(nn::Linear(6, 16), nn::ReLU(), nn::Dropout(0.25), nn::Linear(16, 16),
                                              nn::ReLU(), nn::Linear(16, 3));
  net->to(group().device());
  nn::DistributedDataParallel ddp(net, group_ptr(), nn::DistributedDataParallelOptions().bucket_cap_mb(bucket_mb));
  optim::Adam opt(ddp.parameters(), optim::AdamOptions(1e-2));
  optim::StepLR scheduler(opt, 2, 0.5);
  auto step = [&](const std::vector<Tensor>& in) {
    opt.zero_grad();
    Tensor loss = mse_loss(ddp.forward(in[0]), in[1]);
    loss.backward();
    opt.step();
    return std::vector<Tensor>{loss.detach()};
  };
  optim::CapturedStep captured_step(opt, step);
  manual_seed(50 + static_cast<uint64_t>(group().rank()));
  StepRun run;
  for (size_t i = 0; i < batches.size(); ++i) {
    auto [x, y] = global_batch(batches[i] * group().size(), static_cast<int>(i));
    const Tensor loss = captured ? captured_step({my_rows(x), my_rows(y)})[0] : step({my_rows(x), my_rows(y)})[0];
    run.losses.push_back(loss.item<float>());
    scheduler.step();
  }
  for (const Tensor& p : net->parameters()) run.params.push_back(p.to_vector<float>());
  run.graphs = captured_step.graphs();
  return run;
}

}  // namespace

TEST_CASE("DistributedDataParallel: a captured step computes the eager step's bits, its all-reduces included") {
  // 5 rows a rank, then a short batch of 3 (a second graph), then each replayed again.
  const std::vector<int64_t> batches = {5, 5, 5, 3, 5, 5, 3, 5};
  if (!backend_for(group().device()).can_capture()) {
    // The CPU's group: refused before anything ran, so that no rank issues a collective the others do not.
    auto net = make_net();
    nn::DistributedDataParallel ddp(net, group_ptr());
    optim::SGD opt(ddp.parameters(), optim::SGDOptions(0.1));
    int calls = 0;
    optim::CapturedStep step(opt, [&](const std::vector<Tensor>&) {
      ++calls;
      return std::vector<Tensor>{};
    });
    auto [x, y] = global_batch(2 * group().size(), 0);
    CHECK_THROWS_WITH_AS(step({my_rows(x), my_rows(y)}), doctest::Contains("does not capture graphs"),
                         BackendUnavailable);
    CHECK(calls == 0);
    return;
  }
  for (double bucket_mb : {25.0, 1e-9}) {  // one bucket, on kiln's stream; one for each parameter, on the group's
    CAPTURE(bucket_mb);
    const StepRun eager = train_ddp(batches, bucket_mb, false);
    const StepRun graph = train_ddp(batches, bucket_mb, true);
    CHECK(graph.graphs == 2);
    // Averages over two ranks are one sum of two, in any order: the same bits. Over more, NCCL may
    // order the sums otherwise inside a graph than outside.
    const double within = group().size() <= 2 ? 0.0 : 1e-6;
    for (size_t i = 0; i < eager.losses.size(); ++i) {
      CAPTURE(i);
      CHECK(std::abs(eager.losses[i] - graph.losses[i]) <= within * std::abs(eager.losses[i]));
    }
    REQUIRE(eager.params.size() == graph.params.size());
    for (size_t i = 0; i < eager.params.size(); ++i) {
      CAPTURE(i);
      REQUIRE(eager.params[i].size() == graph.params[i].size());
      double worst = 0;
      for (size_t j = 0; j < eager.params[i].size(); ++j)
        worst = std::max(worst, std::abs(static_cast<double>(eager.params[i][j]) - graph.params[i][j]) /
                                    (std::abs(static_cast<double>(eager.params[i][j])) + 1e-3));
      CHECK(worst <= within);
    }
  }
}
