// Captured CUDA graphs (core/capture.h) and captured training steps (optim/captured_step.h): a
// replayed step computes the eager step's bits, with dropout, every optimizer and a scheduler,
// across a change of batch shape; dropout fused into a max pool keeps those bits in fewer kernels;
// and what a capture cannot do is refused by name.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "tests/cuda/cuda_test.h"

using namespace kiln;
using namespace kiln::test;

namespace {

// A small CNN with dropout: conv, relu, pool, dropout, linear (its parameters on the GPU).
std::shared_ptr<nn::Sequential> small_cnn() {
  manual_seed(11);
  auto net = std::make_shared<nn::Sequential>(nn::Conv2d(1, 4, 3), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                                              nn::Dropout(0.25), nn::Linear(4 * 5 * 5, 10));
  net->to(kCuda);
  return net;
}

struct Run {
  std::vector<float> losses;  // each step's
  std::vector<std::vector<float>> params;
  size_t graphs = 0;
};

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;
using MakeScheduler = std::function<std::unique_ptr<optim::LRScheduler>(optim::Optimizer&)>;

// Trains a fresh small_cnn on fixed batches of these sizes, eagerly or through a CapturedStep,
// stepping the scheduler after every step; dropout draws from the default generator, seeded alike.
// bf16: the forward and the loss under autocast (mixed precision).
Run train(const std::vector<int64_t>& batches, const MakeOptimizer& make_optimizer,
          const MakeScheduler& make_scheduler, bool captured, bool bf16 = false) {
  auto net = small_cnn();
  auto opt = make_optimizer(net->parameters());
  auto scheduler = make_scheduler(*opt);
  auto step = [&](const std::vector<Tensor>& in) {
    opt->zero_grad();
    Tensor loss;
    {
      AutocastGuard autocast(DType::bf16, bf16);
      autocast.cast_ahead(net->parameters());  // as mnist-train: the parameters' casts in one launch
      loss = cross_entropy((*net)(in[0]), in[1]);
    }
    loss.backward();
    opt->step();
    return std::vector<Tensor>{loss.detach()};
  };
  optim::CapturedStep captured_step(*opt, step);
  manual_seed(5);
  Run run;
  for (size_t i = 0; i < batches.size(); ++i) {
    Generator data(100 + i);  // the batch: the same in both runs, drawn from a generator of its own
    Tensor x = uniform({batches[i], 1, 12, 12}, -1.0, 1.0, kCuda, &data);
    Tensor y = (uniform({batches[i]}, 0.0, 10.0, kCuda, &data)).to(DType::i32);
    const Tensor loss = captured ? captured_step({x, y})[0] : step({x, y})[0];
    run.losses.push_back(loss.item<float>());
    if (scheduler) scheduler->step();
  }
  for (const Tensor& p : net->parameters()) run.params.push_back(p.to_vector<float>());
  run.graphs = captured_step.graphs();
  return run;
}

}  // namespace

TEST_CASE("a captured training step computes the eager step's bits: dropout, optimizers, schedulers, shapes") {
  // 64, then a short batch of 24 (a second graph), then 64 again (the first graph, whose
  // gradients come back), then 24 again (the second graph replayed).
  const std::vector<int64_t> batches = {64, 64, 64, 24, 64, 64, 24, 64, 64};
  struct Case {
    std::string name;
    MakeOptimizer optimizer;
    MakeScheduler scheduler;
  };
  const std::vector<Case> cases = {
      {"Adam, OneCycleLR (lr and beta1 each step)",
       [](std::vector<Tensor> p) { return std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions(1e-3)); },
       [&](optim::Optimizer& o) {
         return std::make_unique<optim::OneCycleLR>(o, optim::OneCycleLROptions(1e-2, 20));
       }},
      {"AdamW with weight decay, StepLR",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::AdamW>(std::move(p), optim::AdamOptions(2e-3).weight_decay(0.1));
       },
       [](optim::Optimizer& o) { return std::make_unique<optim::StepLR>(o, 2, 0.5); }},
      {"SGD with Nesterov momentum, StepLR",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions(0.05).momentum(0.9).nesterov());
       },
       [](optim::Optimizer& o) { return std::make_unique<optim::StepLR>(o, 3, 0.7); }},
      {"Adadelta, StepLR",
       [](std::vector<Tensor> p) { return std::make_unique<optim::Adadelta>(std::move(p), optim::AdadeltaOptions()); },
       [](optim::Optimizer& o) { return std::make_unique<optim::StepLR>(o, 1, 0.7); }},
      {"RMSprop centered with momentum, no scheduler",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::RMSprop>(std::move(p),
                                                 optim::RMSpropOptions(1e-3).momentum(0.5).centered(true));
       },
       [](optim::Optimizer&) { return std::unique_ptr<optim::LRScheduler>(); }},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const Run eager = train(batches, c.optimizer, c.scheduler, false);
    const Run graph = train(batches, c.optimizer, c.scheduler, true);
    CHECK(graph.graphs == 2);
    CHECK(eager.losses == graph.losses);
    for (size_t i = 0; i < eager.losses.size(); ++i) {
      CAPTURE(i);
      CHECK(eager.losses[i] == graph.losses[i]);
    }
    REQUIRE(eager.params.size() == graph.params.size());
    for (size_t i = 0; i < eager.params.size(); ++i) CHECK(eager.params[i] == graph.params[i]);
  }
}

TEST_CASE("a captured bf16 step (autocast) computes the eager bf16 step's bits") {
  // The casts to bf16 and back are kernels like the others: the captured step replays them.
  const std::vector<int64_t> batches = {64, 64, 24, 64, 64};
  const MakeOptimizer adam = [](std::vector<Tensor> p) {
    return std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions(1e-3));
  };
  const MakeScheduler one_cycle = [](optim::Optimizer& o) {
    return std::make_unique<optim::OneCycleLR>(o, optim::OneCycleLROptions(1e-2, 10));
  };
  const Run eager = train(batches, adam, one_cycle, false, true);
  const Run graph = train(batches, adam, one_cycle, true, true);
  const Run f32 = train(batches, adam, one_cycle, false, false);
  CHECK(graph.graphs == 2);
  CHECK(eager.losses == graph.losses);
  REQUIRE(eager.params.size() == graph.params.size());
  for (size_t i = 0; i < eager.params.size(); ++i) CHECK(eager.params[i] == graph.params[i]);
  CHECK(eager.losses != f32.losses);  // autocast did lower the products
  for (size_t i = 0; i < eager.losses.size(); ++i) CHECK(std::abs(eager.losses[i] - f32.losses[i]) < 0.05);
}

TEST_CASE("batches gathered into a captured step's own inputs, or by its graph at each replay, train as copied ones do") {
  // 100 images in batches of 32: three of 32 (one graph), then one of 4 (a second), two epochs (a
  // new order each). copied: each batch gathered, then copied into the graph's inputs; staged: the
  // loader writes each batch into the step's inputs (inputs_like), and the step copies nothing;
  // in_graph: the step gathers batch `index` itself (DataLoader::batch_at), so that its graph
  // gathers at each replay the batch that `index` names then, and nothing runs between replays
  Generator data(9);
  const Tensor images = uniform({100, 1, 12, 12}, -1.0, 1.0, kCuda, &data);
  const Tensor labels = uniform({100}, 0.0, 10.0, kCuda, &data).to(DType::i32);
  data::DataLoader loader(images, labels, data::DataLoaderOptions().batch_size(32).seed(2));
  enum Mode { copied, staged, in_graph };
  auto run = [&](Mode mode) {
    auto net = small_cnn();
    optim::SGD opt(net->parameters(), optim::SGDOptions(0.05).momentum(0.9));
    int64_t index = 0;
    optim::CapturedStep step(opt, [&](const std::vector<Tensor>& in) {
      data::Batch b{in[0], in[1]};
      if (mode == in_graph) b = loader.batch_at(&index, b);
      opt.zero_grad();
      Tensor loss = cross_entropy((*net)(b.inputs), b.targets);
      loss.backward();
      opt.step();
      return std::vector<Tensor>{loss.detach()};
    });
    step.keep(4);
    manual_seed(5);
    std::vector<float> losses;
    data::Batch into;                      // staged: the last step's own inputs
    std::map<int64_t, data::Batch> own;    // in_graph: the step's own inputs by batch size
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      loader.set_epoch(epoch);
      for (int64_t i = 0; i < loader.num_batches(); ++i) {
        index = i;
        const int64_t rows = loader.batch_rows(i);
        // in_graph, once the step has a graph for this size, nothing is gathered here
        const bool mine = mode == in_graph && own.count(rows) > 0;
        const data::Batch b = mine ? own[rows] : loader.batch(i, mode == staged ? into : data::Batch{});
        step({b.inputs, b.targets});
        const std::vector<Tensor> its = step.inputs_like({b.inputs, b.targets});
        if (its.empty()) continue;
        CHECK(its[0].shape() == b.inputs.shape());
        into = {its[0], its[1]};
        own[rows] = into;
      }
      for (float v : step.recent(0, 4).to_vector<float>()) losses.push_back(v);
    }
    CHECK(step.graphs() == 2);
    return losses;
  };
  const std::vector<float> copied_losses = run(copied);
  CHECK(copied_losses.size() == 8);
  CHECK(copied_losses == run(staged));
  CHECK(copied_losses == run(in_graph));

  // batch_at's graph refuses a replay whose index names a batch of other rows than at its capture
  auto net = small_cnn();
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.1));
  int64_t index = 0;
  optim::CapturedStep step(opt, [&](const std::vector<Tensor>& in) {
    const data::Batch b = loader.batch_at(&index, {in[0], in[1]});
    opt.zero_grad();
    cross_entropy((*net)(b.inputs), b.targets).backward();
    opt.step();
    return std::vector<Tensor>{};
  });
  const data::Batch first = loader.batch(0);
  step({first.inputs, first.targets});  // eager
  step({first.inputs, first.targets});  // captured on batch 0's 32 rows
  index = 3;                            // the last batch: 4 rows
  CHECK_THROWS_WITH_AS(step(step.inputs_like({first.inputs, first.targets})),
                       doctest::Contains("batch 3 holds 4 samples, but the step was captured on a batch of 32"),
                       ValueError);
  // before a graph for a shape exists there are no inputs of its own
  optim::CapturedStep fresh(opt, [](const std::vector<Tensor>& in) { return in; });
  CHECK(fresh.inputs_like({images, labels}).empty());
}

TEST_CASE("a replay reads what its inputs hold then, and dropout draws a fresh mask each replay") {
  Tensor x = ones({1000}, kCuda);
  Tensor out = zeros({1000}, kCuda);
  Generator gen(3);
  Graph graph = capture(kCuda, [&] {
    NoGradGuard no_grad;
    out.copy_(dropout(x * 2.0, 0.5, true, &gen));
  });
  CHECK(graph.kernels() >= 2);
  Generator eager(3);
  for (int r = 0; r < 3; ++r) {
    x.fill_(1.0 + r);
    graph.replay();
    const Tensor expected = dropout(x * 2.0, 0.5, true, &eager);
    CHECK(out.to_vector<float>() == expected.to_vector<float>());
  }
  CHECK(gen.offset() == eager.offset());
}

TEST_CASE("max_pool2d_dropout: one kernel each way where the pool and dropout take two, a fresh mask each replay") {
  // conv2d + relu, then the 2 x 2 pool with dropout, as the MNIST CNN's conv2, pool and dropout1,
  // forward and backward in one graph: fused, and as max_pool2d then dropout.
  Generator init(21);
  const Tensor x = uniform({6, 4, 18, 18}, -1.0, 1.0, kCuda, &init);
  const Tensor w0 = uniform({8, 4, 3, 3}, -0.5, 0.5, kCuda, &init);
  const Tensor g = uniform({6, 8, 8, 8}, -1.0, 1.0, kCuda, &init);
  auto run = [&](bool fused) {
    Tensor w = w0.clone().requires_grad_();
    Tensor out = zeros({6, 8, 8, 8}, kCuda);
    Generator gen(3);
    Graph graph = capture(kCuda, [&] {
      Tensor h = conv2d(x, w, {}, {}, Activation::relu);  // [6, 8, 16, 16]
      Tensor y = fused ? max_pool2d_dropout(h, {.kernel = {2, 2}}, 0.25, true, &gen)
                       : dropout(max_pool2d(h, {.kernel = {2, 2}}), 0.25, true, &gen);
      out.copy_(y.detach());
      (y * g).sum().backward();
    });
    graph.replay();
    return std::make_tuple(graph.kernels(), out.to_vector<float>(), w.grad().to_vector<float>(), gen.offset());
  };
  const auto [fused_kernels, fused_y, fused_grad, fused_offset] = run(true);
  const auto [kernels, y, grad, offset] = run(false);
  CHECK(kernels == fused_kernels + 2);
  CHECK(fused_y == y);
  CHECK(fused_grad == grad);
  CHECK(fused_offset == offset);

  // replayed, each draws the mask eager dropout would draw then
  Tensor h = conv2d(x, w0, {}, {}, Activation::relu);
  Tensor out = zeros({6, 8, 8, 8}, kCuda);
  Generator gen(5);
  Graph graph = capture(kCuda, [&] {
    NoGradGuard no_grad;
    out.copy_(max_pool2d_dropout(h, {.kernel = {2, 2}}, 0.5, true, &gen));
  });
  Generator eager(5);
  for (int r = 0; r < 3; ++r) {
    graph.replay();
    CHECK(out.to_vector<float>() == dropout(max_pool2d(h, {.kernel = {2, 2}}), 0.5, true, &eager).to_vector<float>());
  }
  CHECK(gen.offset() == eager.offset());
}

TEST_CASE("what a capture cannot do is refused by name, and the device works after") {
  Tensor x = ones({8}, kCuda);
  SUBCASE("reading the device") {
    CHECK_THROWS_WITH_AS(capture(kCuda, [&] { (void)(x * 2.0).sum().item(); }),
                         doctest::Contains("inside a captured step"), CaptureError);
    CHECK_THROWS_WITH_AS(capture(kCuda, [&] { (void)x.to_vector<float>(); }),
                         doctest::Contains("inside a captured step"), CaptureError);
  }
  SUBCASE("a tensor made from host values") {
    CHECK_THROWS_AS(capture(kCuda, [&] { (void)from_vector(std::vector<float>{1.0f, 2.0f}, {2}, kCuda); }), CaptureError);
  }
  SUBCASE("an optimizer's first step, which makes its state") {
    Tensor w = ones({4}, kCuda).requires_grad_();
    optim::Adam opt({w}, optim::AdamOptions(0.1));
    (w * 3.0).sum().backward();
    CHECK_THROWS_WITH_AS(capture(kCuda, [&] { opt.step(); }), doctest::Contains("must run eagerly"), CaptureError);
  }
  SUBCASE("nested captures") {
    CHECK_THROWS_AS(capture(kCuda, [&] { (void)capture(kCuda, [] {}); }), CaptureError);
  }
  CHECK(capturing(kCuda) == nullptr);
  CHECK((x * 3.0).sum().item() == 24.0);
}
