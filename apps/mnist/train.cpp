// mnist-train: trains a digit classifier on MNIST (or any data set in its IDX layout) with kiln.
// It reads as PyTorch's examples/mnist does: the model (models.h), train(), test(), main.
//
// Exit codes: 0 done; 1 runtime error (bad data, bad checkpoint, out of memory, ...); 2 usage
// error (unknown flag, bad value); 130 stopped by Ctrl-C (after saving, with --save).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "apps/mnist/checkpoint.h"
#include "apps/mnist/device.h"
#include "apps/mnist/models.h"
#include "apps/mnist/plot.h"
#include "kiln/kiln.h"

namespace {

using namespace kiln;
using Clock = std::chrono::steady_clock;


struct Config {
  std::string data = "data/mnist";
  std::string model = "cnn";
  int64_t epochs = 14;
  int64_t batch_size = 64;
  int64_t test_batch_size = 1000;
  std::string optimizer = "adadelta";
  double lr = 1.0;
  double momentum = 0.0;
  double weight_decay = 0.0;
  std::string scheduler = "step";
  double gamma = 0.7;
  uint64_t seed = 1;
  std::string device = "auto";
  bool tf32 = false;  // let CUDA matmul and conv2d use TF32 tensor cores
  int64_t log_interval = 10;
  int64_t limit_train = 0;
  int64_t limit_test = 0;
  int64_t augment = 0;  // random translations of up to this many pixels (0: none)
  std::string save, resume, metrics_out, plot;
  int verbosity = 1;  // 0 quiet, 1 normal, 2 verbose

  // The settings that define a run (and must match when resuming), as one JSON line.
  std::string json() const {
    std::ostringstream o;
    o << "{\"model\":\"" << model << "\",\"epochs\":" << epochs << ",\"batch_size\":" << batch_size
      << ",\"optimizer\":\"" << optimizer << "\",\"lr\":" << lr << ",\"momentum\":" << momentum
      << ",\"weight_decay\":" << weight_decay << ",\"scheduler\":\"" << scheduler << "\",\"gamma\":" << gamma
      << ",\"seed\":" << seed << ",\"limit_train\":" << limit_train << ",\"augment\":" << augment << "}";
    return o.str();
  }
};

// ---- logging: results on stdout, everything else on stderr ----

bool g_tty = false;
int g_verbosity = 1;

void info(const std::string& line) {
  if (g_verbosity >= 1) std::cerr << (g_tty ? "\r\033[K" : "") << line << "\n";
}

std::string fmt(const char* format, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
}

// ---- Ctrl-C: the first asks to stop at the next step boundary, the second exits at once ----

std::atomic<int> g_interrupts{0};

extern "C" void on_sigint(int) {
  if (g_interrupts.fetch_add(1) >= 1) _exit(130);
}


// ---- optimizer and schedule ----

std::unique_ptr<optim::Optimizer> make_optimizer(const Config& c, std::vector<Tensor> params) {
  if (c.optimizer == "sgd")
    return std::make_unique<optim::SGD>(params, optim::SGDOptions(c.lr).momentum(c.momentum).weight_decay(c.weight_decay));
  if (c.optimizer == "adam")
    return std::make_unique<optim::Adam>(params, optim::AdamOptions(c.lr).weight_decay(c.weight_decay));
  if (c.optimizer == "adamw")
    return std::make_unique<optim::AdamW>(params, optim::AdamWOptions(c.lr).weight_decay(c.weight_decay));
  if (c.optimizer == "adadelta")
    return std::make_unique<optim::Adadelta>(params, optim::AdadeltaOptions(c.lr).weight_decay(c.weight_decay));
  if (c.optimizer == "rmsprop")
    return std::make_unique<optim::RMSprop>(params, optim::RMSpropOptions(c.lr).momentum(c.momentum).weight_decay(c.weight_decay));
  KILN_FAIL(ValueError, "unknown optimizer '", c.optimizer, "'");
}

std::unique_ptr<optim::LRScheduler> make_scheduler(const Config& c, optim::Optimizer& opt, int64_t steps_per_epoch) {
  if (c.scheduler == "step") return std::make_unique<optim::StepLR>(opt, 1, c.gamma);
  if (c.scheduler == "cosine") return std::make_unique<optim::CosineAnnealingLR>(opt, c.epochs);
  if (c.scheduler == "onecycle")
    return std::make_unique<optim::OneCycleLR>(opt, optim::OneCycleLROptions(c.lr, c.epochs * steps_per_epoch));
  return nullptr;  // "none"
}

// ---- the run ----

struct Metrics {
  std::ofstream out;
  void write(const std::string& json) {
    if (out.is_open()) out << json << "\n" << std::flush;
  }
};

struct EpochResult {
  double loss = 0, accuracy = 0;
};

// Sum of the loss and count of correct predictions over the test set, and the confusion matrix
// (rows: true digit, columns: predicted), all accumulated on the device and read once.
EpochResult test(nn::Module& model, const data::DataLoader& loader, std::vector<int64_t>* confusion) {
  NoGradGuard no_grad;
  model.eval();
  Tensor loss_sum, correct, counts;
  for (const data::Batch& b : loader) {
    Tensor logits = model(b.inputs);
    Tensor l = cross_entropy(logits, b.targets, Reduction::sum);
    Tensor predicted = argmax(logits, 1);
    Tensor c = eq(predicted, b.targets).sum();
    Tensor pairs = one_hot(b.targets * 10 + predicted, 100).sum({0});  // [100]: true * 10 + predicted
    loss_sum = loss_sum.defined() ? loss_sum + l : l;
    correct = correct.defined() ? correct + c : c;
    counts = counts.defined() ? counts + pairs : pairs;
  }
  auto n = static_cast<double>(loader.size());
  if (confusion) {
    confusion->clear();
    for (float v : counts.to_vector<float>()) confusion->push_back(static_cast<int64_t>(v));
  }
  return {loss_sum.item() / n, correct.item() / n};
}

void print_confusion(const std::vector<int64_t>& m) {
  std::cout << "confusion matrix (rows: true digit, columns: predicted)\n      ";
  for (int p = 0; p < 10; ++p) std::cout << fmt("%6d", p);
  std::cout << "\n";
  for (int t = 0; t < 10; ++t) {
    std::cout << fmt("%6d", t);
    for (int p = 0; p < 10; ++p) std::cout << fmt("%6lld", static_cast<long long>(m[static_cast<size_t>(t * 10 + p)]));
    std::cout << "\n";
  }
}

int run(Config c) {
  Device device = apps::pick_device(c.device, info, g_verbosity >= 2);
  set_allow_tf32(c.tf32);
  std::optional<apps::LoadedCheckpoint> resumed;
  if (!c.resume.empty()) {
    resumed = apps::load_checkpoint(c.resume);
    info("resuming " + c.resume + ": epoch " + std::to_string(resumed->state.epoch + 1) + ", batch " +
         std::to_string(resumed->state.batch) + ", settings " + resumed->state.config);
    KILN_CHECK(resumed->state.model == c.model, ValueError, "--resume: the checkpoint holds a '",
               resumed->state.model, "' model, but --model is '", c.model, "'");
  }
  info("config: " + c.json());

  // Data: read once, held on the training device.
  Clock::time_point t0 = Clock::now();
  data::MnistData train_set = data::load_mnist(c.data, data::Split::train);
  data::MnistData test_set = data::load_mnist(c.data, data::Split::test);
  if (c.limit_train > 0 && c.limit_train < train_set.images.size(0)) {
    train_set.images = train_set.images.slice(0, 0, c.limit_train);
    train_set.labels = train_set.labels.slice(0, 0, c.limit_train);
  }
  if (c.limit_test > 0 && c.limit_test < test_set.images.size(0)) {
    test_set.images = test_set.images.slice(0, 0, c.limit_test);
    test_set.labels = test_set.labels.slice(0, 0, c.limit_test);
  }
  data::DataLoader train_loader(data::normalize_images(train_set.images, device), train_set.labels.to(device),
                                data::DataLoaderOptions().batch_size(c.batch_size).seed(c.seed));
  data::DataLoader test_loader(data::normalize_images(test_set.images, device), test_set.labels.to(device),
                               data::DataLoaderOptions().batch_size(c.test_batch_size).shuffle(false));
  info(fmt("data: %lld training and %lld test images from %s (%.2f s)", static_cast<long long>(train_loader.size()),
           static_cast<long long>(test_loader.size()), c.data.c_str(),
           std::chrono::duration<double>(Clock::now() - t0).count()));

  manual_seed(c.seed);
  std::shared_ptr<nn::Module> model = apps::make_model(c.model);
  model->to(device);
  if (g_verbosity >= 2) std::cerr << *model;
  std::unique_ptr<optim::Optimizer> opt = make_optimizer(c, model->parameters());
  std::unique_ptr<optim::LRScheduler> sched = make_scheduler(c, *opt, train_loader.num_batches());

  apps::RunState state{c.model, c.json()};
  if (resumed) {
    model->load_state_dict(resumed->model);
    opt->load_state_dict(resumed->optimizer);
    if (sched) sched->load_state_dict(resumed->scheduler);
    state = resumed->state;
    state.config = c.json();
    default_generator().set_state(state.rng_seed, state.rng_offset);
  }

  Metrics metrics;
  if (!c.metrics_out.empty()) {
    metrics.out.open(c.metrics_out, resumed ? std::ios::app : std::ios::trunc);
    KILN_CHECK(metrics.out.is_open(), Error, "--metrics-out: cannot write '", c.metrics_out, "'");
  }
  auto save = [&] {
    if (c.save.empty()) return;
    state.rng_seed = default_generator().seed();
    state.rng_offset = default_generator().offset();
    apps::save_checkpoint(c.save, *model, *opt, sched.get(), state);
    info("saved " + c.save);
  };

  std::signal(SIGINT, on_sigint);
  std::vector<double> epochs_x, train_losses, test_losses, test_accuracies;
  std::vector<int64_t> confusion;
  double best = 0.0;
  Clock::time_point run_start = Clock::now();
  const int64_t batches = train_loader.num_batches();

  for (; state.epoch < c.epochs; ++state.epoch, state.batch = 0) {
    model->train();
    train_loader.set_epoch(state.epoch);
    Clock::time_point epoch_start = Clock::now(), window_start = epoch_start;
    Tensor loss_sum, correct;  // accumulate on the device; read at the end of the epoch
    const int64_t first_batch = state.batch;  // not 0 when resuming inside an epoch
    int64_t seen = 0, window_seen = 0;
    double last_loss = 0.0;
    for (int64_t i = state.batch; i < batches; ++i) {
      data::Batch b = train_loader.batch(i);
      if (c.augment > 0) b.inputs = data::random_translate(b.inputs, c.augment, -0.1307 / 0.3081);
      opt->zero_grad();
      Tensor logits = (*model)(b.inputs);
      Tensor loss = cross_entropy(logits, b.targets);
      loss.backward();
      opt->step();
      if (sched && c.scheduler == "onecycle") sched->step();
      ++state.step;
      state.batch = i + 1;
      {
        NoGradGuard no_grad;
        Tensor l = loss.detach() * static_cast<double>(b.targets.numel());
        Tensor ok = eq(argmax(logits.detach(), 1), b.targets).sum();
        loss_sum = loss_sum.defined() ? loss_sum + l : l;
        correct = correct.defined() ? correct + ok : ok;
      }
      seen += b.targets.numel();
      window_seen += b.targets.numel();

      if ((i + 1) % c.log_interval == 0 || i + 1 == batches) {
        last_loss = loss.item();
        double secs = std::chrono::duration<double>(Clock::now() - window_start).count();
        double rate = static_cast<double>(window_seen) / std::max(secs, 1e-9);
        double done = static_cast<double>(i + 1) / static_cast<double>(batches);
        double elapsed = std::chrono::duration<double>(Clock::now() - epoch_start).count();
        double eta = static_cast<double>(batches - i - 1) * elapsed / static_cast<double>(i + 1 - first_batch);
        metrics.write(fmt("{\"type\":\"train\",\"epoch\":%lld,\"batch\":%lld,\"step\":%lld,\"loss\":%.6f,\"images_per_s\":%.1f}",
                          static_cast<long long>(state.epoch + 1), static_cast<long long>(i + 1),
                          static_cast<long long>(state.step), last_loss, rate));
        if (g_verbosity >= 1) {
          if (g_tty) {
            int filled = static_cast<int>(done * 30);
            std::cerr << fmt("\r\033[Kepoch %lld/%lld [%s%s] %lld/%lld loss %.4f  %.0f img/s  ETA %.0fs",
                             static_cast<long long>(state.epoch + 1), static_cast<long long>(c.epochs),
                             std::string(static_cast<size_t>(filled), '#').c_str(),
                             std::string(static_cast<size_t>(30 - filled), '.').c_str(), static_cast<long long>(i + 1),
                             static_cast<long long>(batches), last_loss, rate, eta)
                      << std::flush;
          } else if (g_verbosity >= 2 || (i + 1) % (c.log_interval * 10) == 0 || i + 1 == batches) {
            info(fmt("epoch %lld batch %lld/%lld loss %.4f %.0f img/s", static_cast<long long>(state.epoch + 1),
                     static_cast<long long>(i + 1), static_cast<long long>(batches), last_loss, rate));
          }
        }
        window_start = Clock::now();
        window_seen = 0;
      }
      if (g_interrupts.load() > 0) {
        info("interrupted: stopping at a step boundary");
        save();
        if (c.save.empty()) info("nothing saved (no --save given)");
        return 130;
      }
    }
    if (sched && c.scheduler != "onecycle") sched->step();
    double train_time = std::chrono::duration<double>(Clock::now() - epoch_start).count();
    double train_loss = seen ? loss_sum.item() / static_cast<double>(seen) : 0.0;
    double train_acc = seen ? correct.item() / static_cast<double>(seen) : 0.0;
    EpochResult r = test(*model, test_loader, &confusion);
    best = std::max(best, r.accuracy);
    double images_per_s = static_cast<double>(seen) / std::max(train_time, 1e-9);
    if (g_tty && g_verbosity >= 1) std::cerr << "\r\033[K" << std::flush;  // the bar gives way to the summary
    std::cout << fmt("epoch %2lld  train loss %.4f acc %.2f%%  test loss %.4f acc %.2f%%  %.1f s  %.0f img/s  lr %.4g",
                     static_cast<long long>(state.epoch + 1), train_loss, 100 * train_acc, r.loss, 100 * r.accuracy,
                     train_time, images_per_s, opt->lr())
              << std::endl;
    metrics.write(fmt("{\"type\":\"epoch\",\"epoch\":%lld,\"train_loss\":%.6f,\"train_accuracy\":%.6f,\"test_loss\":%.6f,"
                      "\"test_accuracy\":%.6f,\"seconds\":%.3f,\"images_per_s\":%.1f,\"lr\":%.8g}",
                      static_cast<long long>(state.epoch + 1), train_loss, train_acc, r.loss, r.accuracy, train_time,
                      images_per_s, opt->lr()));
    epochs_x.push_back(static_cast<double>(state.epoch + 1));
    train_losses.push_back(train_loss);
    test_losses.push_back(r.loss);
    test_accuracies.push_back(r.accuracy);
    state.batch = batches;
    {
      apps::RunState next = state;  // saved as "epoch done": resume starts the next one
      ++next.epoch;
      next.batch = 0;
      std::swap(state, next);
      save();
      std::swap(state, next);
    }
    if (!c.plot.empty()) {
      apps::write_plot_png(c.plot, {{"Loss", "epoch", "cross-entropy",
                                     {{"train loss", epochs_x, train_losses, apps::plot_blue},
                                      {"test loss", epochs_x, test_losses, apps::plot_orange}}},
                                    {"Test accuracy", "epoch", "accuracy",
                                     {{"test accuracy", epochs_x, test_accuracies, apps::plot_green}}}});
    }
  }

  double total = std::chrono::duration<double>(Clock::now() - run_start).count();
  if (!confusion.empty()) print_confusion(confusion);
  std::cout << fmt("best test accuracy %.2f%%  total %.1f s  device %s", 100 * best, total, device.str().c_str())
            << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  if (const char* env = std::getenv("KILN_DATA")) c.data = env;
  CLI::App app{"mnist-train: trains a digit classifier on MNIST with kiln"};
  app.set_config("--config", "", "read options from a TOML/INI file (flags on the command line win)");
  app.add_option("--data", c.data, "folder with the IDX files (env KILN_DATA)")->capture_default_str();
  app.add_option("--model", c.model, "cnn (PyTorch examples/mnist), mlp (784-128-10) or fast")
      ->check(CLI::IsMember({"cnn", "mlp", "fast"}))->capture_default_str();
  app.add_option("--epochs", c.epochs, "epochs to train")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--batch-size", c.batch_size, "training batch size")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--test-batch-size", c.test_batch_size, "test batch size")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--optimizer", c.optimizer, "sgd, adam, adamw, adadelta or rmsprop")
      ->check(CLI::IsMember({"sgd", "adam", "adamw", "adadelta", "rmsprop"}))->capture_default_str();
  app.add_option("--lr", c.lr, "learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--momentum", c.momentum, "momentum (sgd, rmsprop)")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay, "weight decay")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--scheduler", c.scheduler, "step (x gamma each epoch), cosine, onecycle or none")
      ->check(CLI::IsMember({"step", "cosine", "onecycle", "none"}))->capture_default_str();
  app.add_option("--gamma", c.gamma, "learning-rate decay per epoch of the step scheduler")->capture_default_str();
  app.add_option("--seed", c.seed, "random seed (init, dropout, shuffling)")->capture_default_str();
  app.add_option("--device", c.device, "auto, cpu, cuda[:N] or vulkan[:N]")
      ->check(apps::check_device_spec)
      ->capture_default_str();
  app.add_flag("--tf32", c.tf32, "CUDA matmul and conv2d may cut f32 inputs to TF32 (faster, ~7e-4 relative error)");
  app.add_option("--log-interval", c.log_interval, "batches between progress updates")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--limit-train", c.limit_train, "train on the first N images only (0: all)")->capture_default_str();
  app.add_option("--limit-test", c.limit_test, "test on the first N images only (0: all)")->capture_default_str();
  app.add_option("--augment", c.augment, "shift training images randomly by up to N pixels (0: off)")
      ->check(CLI::Range(0, 8))->capture_default_str();
  app.add_option("--save", c.save, "write a checkpoint here after every epoch and on Ctrl-C");
  app.add_option("--resume", c.resume, "continue the run saved in this checkpoint");
  app.add_option("--metrics-out", c.metrics_out, "append JSON lines of metrics to this file");
  app.add_option("--plot", c.plot, "write loss and accuracy curves to this PNG after every epoch");
  app.add_flag("-v,--verbose", [&](int64_t) { c.verbosity = 2; }, "more detail on stderr");
  app.add_flag("-q,--quiet", [&](int64_t) { c.verbosity = 0; }, "no progress on stderr");
  app.set_version_flag("--version", std::string("mnist-train (kiln) ") + KILN_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  g_verbosity = c.verbosity;
  g_tty = ::isatty(STDERR_FILENO) != 0;
  try {
    return run(c);
  } catch (const std::exception& e) {
    std::cerr << "mnist-train: error: " << e.what() << "\n";
    return 1;
  }
}
