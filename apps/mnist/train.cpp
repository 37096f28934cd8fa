// mnist-train: trains a digit classifier on MNIST (or any data set in its IDX layout) with kiln.
// It reads top to bottom as PyTorch's examples/mnist does: the options, the data, the model (the
// nets are in models.h) with its optimizer and schedule, train_epoch(), test(), the lines logged
// and the checkpoint saved after each epoch, then run() and main(), which put them together.
//
// Data-parallel: under `mpirun -np N` (or with --distributed) every process trains the same model
// on its shard of each epoch (--batch-size images a step), gradients averaged over the processes
// after each backward (nn::DistributedDataParallel: NCCL on CUDA, MPI on the CPU); rank 0 alone
// prints, writes metrics, plots and checkpoints, and its checkpoints resume with any number of
// processes.
//
// Exit codes: 0 done; 1 runtime error (bad data, bad checkpoint, out of memory, a rank that
// failed, ...); 2 usage error (unknown flag, bad value); 130 stopped by Ctrl-C (after saving, with --save).
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "apps/mnist/checkpoint.h"
#include "apps/mnist/cli.h"
#include "apps/mnist/device.h"
#include "apps/mnist/log.h"
#include "apps/mnist/models.h"
#include "apps/mnist/plot.h"
#include "apps/mnist/train_config.h"
#include "kiln/kiln.h"

namespace {

using namespace kiln;
using apps::Config;
using Clock = std::chrono::steady_clock;

// ---- output: results on stdout, the rest logged on stderr (apps/mnist/log.h) ----

bool g_tty = false;  // stderr is a terminal: progress is a live bar, which logged lines clear first
int g_verbosity = 1;  // 0 (-q): no progress; 2 (-v): a progress line every --log-interval without a terminal
bool g_rank0 = true;  // data-parallel: only rank 0 prints results, writes files and checkpoints, and logs

// --metrics-out: one JSON object a line, each written whole at once, so a run that dies keeps what
// it logged and the file is valid JSON Lines at every moment (a write that fails, on a full disk,
// stops the run with IoError naming the file). A resumed run appends; a new one starts afresh.
// Lines: "run" (kiln's version and git revision, the device, the settings) first, then "train" every log interval
// and "epoch" after each epoch; a number that is not finite is written null.
using Metrics = LineFile;

Metrics open_metrics(const Config& c, bool resumed) {
  if (c.metrics_out.empty() || !g_rank0) return {};
  return LineFile(c.metrics_out, resumed);
}

// The folders that --save, --metrics-out and --plot name are made when missing (a fresh checkout has
// no out/), and a --save or --plot that names a directory, a FIFO or a device is refused before any
// work: those files are replaced whole, which would replace the device.
void prepare_outputs(const Config& c) {
  if (!g_rank0) return;
  for (const auto& [flag, path] : {std::pair{"--save", c.save}, {"--metrics-out", c.metrics_out}, {"--plot", c.plot}}) {
    if (path.empty()) continue;
    const std::filesystem::path folder = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!folder.empty()) std::filesystem::create_directories(folder, ec);
    KILN_CHECK(!ec, IoError, flag, ": cannot make the folder '", folder.string(), "': ", ec.message());
    const std::filesystem::file_status status = std::filesystem::status(path, ec);
    const bool stream_ok = std::string_view(flag) == "--metrics-out" && !std::filesystem::is_directory(status);
    KILN_CHECK(!std::filesystem::exists(status) || std::filesystem::is_regular_file(status) || stream_ok, IoError,
               flag, " '", path, "' is not a regular file (a directory, a FIFO or a device): it would be replaced "
               "whole; give a file's path");
  }
}

// ---- Ctrl-C: the first asks to stop at the next step boundary, the second exits at once ----

// Ctrl-C (SIGINT) or SIGTERM: the first asks to stop at the next step boundary (or after the
// epoch's test, when it comes during one), saving with --save; a second ends the process at once.
// The exit code is 128 + the first signal's number: 130 or 143.
std::atomic<int> g_interrupts{0};
std::atomic<int> g_stop_signal{SIGINT};

extern "C" void on_stop_signal(int signal) {
  if (g_interrupts.fetch_add(1) >= 1) {
    remove_temporary_in_progress();  // a save cut short leaves nothing behind
    _exit(128 + signal);
  }
  g_stop_signal.store(signal);
}

int interrupted_exit_code() { return 128 + g_stop_signal.load(); }

// This rank's "a stop was asked" as a number on `device`, for the ranks' votes.
Tensor interrupted_flag(const Device& device) { return scalar(g_interrupts.load() > 0 ? 1.0 : 0.0, device); }

// ---- data-parallel: the job's process group, when there is one ----

struct Parallel {
  std::shared_ptr<ProcessGroup> group;  // null: one process
  int rank() const { return group ? group->rank() : 0; }
  int size() const { return group ? group->size() : 1; }
  // t (on the training device) summed over the ranks, in place; nothing for one process.
  void sum(const Tensor& t) const {
    if (group) group->all_reduce(t, ReduceOp::sum);
  }
};

// The device and, under mpirun -np N > 1 or with --distributed, the process group: each rank on
// the GPU of its local rank (cuda), or on the CPU through MPI. Ranks with different settings stop
// here, naming the difference, rather than train different things.
std::pair<Device, Parallel> pick_device_and_group(const Config& c) {
  if (!c.distributed && !launched_with_several_ranks())
    return {apps::pick_device(c.device), Parallel{}};
  Device wanted = apps::pick_device(c.device, false);  // every rank would log it
  KILN_CHECK(wanted.is_cpu() || c.device.find(':') == std::string::npos, ValueError, "--device ", c.device,
             " names one GPU, but a data-parallel rank takes the GPU of its local rank: pass --device ",
             device_type_name(wanted.type));
  Parallel par{init_process_group(wanted.type)};
  g_rank0 = par.rank() == 0;
  if (!g_rank0) {
    g_verbosity = 0;
    // the program's logger alone (spdlog::set_level would set every registered logger, kiln's too):
    // kiln's warnings still come from every rank
    spdlog::default_logger()->set_level(spdlog::level::err);
  }
  par.group->check_same("the settings", c.settings(par.size()).dump() + " device " + std::string(device_type_name(wanted.type)) +
                                            " precision " + (c.use_tf32() ? "tf32" : c.precision) + " data " + c.data);
  spdlog::info("data-parallel: {} processes ({}), device {} on rank 0, batch {} per process ({} a step in all)",
               par.size(), par.group->name(), par.group->device().str(), c.batch_size, c.batch_size * par.size());
  return {par.group->device(), par};
}

// ---- data: read once, held on the training device ----

struct Loaders {
  data::DataLoader train, test;
};

// The first `limit` images and labels (all of them when limit is 0 or not below their number).
void keep_first(data::MnistData& set, int64_t limit) {
  if (limit > 0 && limit < set.images.size(0)) {
    set.images = set.images.slice(0, 0, limit);
    set.labels = set.labels.slice(0, 0, limit);
  }
}

// Data-parallel, each rank holds the whole set and serves its shard of each epoch's order: for
// training, padded to equal shards (every rank takes as many steps; a few images are seen twice
// an epoch); for testing, exact (uneven) shards whose sums are added over the ranks.
Loaders load_data(const Config& c, const Device& device, const Parallel& par) {
  Clock::time_point t0 = Clock::now();
  data::MnistData train_set = data::load_mnist(c.data, data::Split::train);
  data::MnistData test_set = data::load_mnist(c.data, data::Split::test);
  keep_first(train_set, c.limit_train);
  keep_first(test_set, c.limit_test);
  Loaders loaders{data::DataLoader(data::normalize_images(train_set.images, device), train_set.labels.to(device),
                                   data::DataLoaderOptions().batch_size(c.batch_size).seed(c.seed)
                                       .shard(par.rank(), par.size())),
                  data::DataLoader(data::normalize_images(test_set.images, device), test_set.labels.to(device),
                                   data::DataLoaderOptions().batch_size(c.test_batch_size).shuffle(false)
                                       .shard(par.rank(), par.size()).shard_tail(data::ShardTail::uneven))};
  spdlog::info("data: {} training and {} test images from {} ({:.2f} s)", loaders.train.dataset_size(),
               loaders.test.dataset_size(), c.data, std::chrono::duration<double>(Clock::now() - t0).count());
  return loaders;
}

// ---- the model, its optimizer and schedule ----

// What a run trains, and what its checkpoint holds.
struct Training {
  std::shared_ptr<nn::Module> model;
  std::shared_ptr<nn::Module> net;  // what the forward goes through: the model, or its data-parallel wrapper
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<optim::LRScheduler> scheduler;  // null with --scheduler none
  apps::RunState state;                           // where the run stands: epoch, batch, step
  // The epoch's correct predictions, on the device, updated in place by every step: a captured
  // step's graph writes them where they are. (Its loss is summed on the host, from the losses the
  // progress updates read anyway.)
  Tensor correct;
  std::unique_ptr<optim::CapturedStep> captured;  // --graph: the step as CUDA graphs, one per batch shape
  bool bf16 = false;  // --precision bf16: forward and loss under autocast
  int64_t augment = 0;  // --augment: the largest random shift of an image, in pixels
};

// One training step on batch t.state.batch of `loader` (the next one the run trains on), gathered
// into `into` (a captured step's inputs; none: new tensors) and shifted at random (--augment): what
// --graph captures and replays, its graph gathering at every replay the batch t.state.batch names
// then (DataLoader::batch_at), so that nothing runs between replays. Returns the batch's mean loss.
std::vector<Tensor> train_step(Training& t, const data::DataLoader& loader, const std::vector<Tensor>& into) {
  data::Batch b = loader.batch_at(&t.state.batch, into.empty() ? data::Batch{} : data::Batch{into[0], into[1]});
  // shifted-in pixels get the background: black (0) after normalisation is -mean / std
  if (t.augment > 0) b.inputs = data::random_translate(b.inputs, t.augment, -0.1307 / 0.3081);
  t.optimizer->zero_grad();
  Tensor loss;
  {
    AutocastGuard autocast(DType::bf16, t.bf16);  // bf16 products, an f32 loss (autograd/autocast.h)
    std::vector<Tensor> cast = t.model->parameters();
    cast.push_back(b.inputs);
    autocast.cast_ahead(cast);  // the weights' and the images' bf16 copies in one launch
    // the loss, and t.correct += the batch's correct predictions, in one pass over the logits
    loss = cross_entropy_counting((*t.net)(b.inputs), b.targets, t.correct);
  }
  loss.backward();
  t.optimizer->step();
  return {loss.detach()};
}

// --graph: whether this run captures its steps. Captured steps need CUDA devices; a data-parallel
// step captures its all-reduces with it (every rank its own graph). --detect-anomaly (which waits
// for every op) runs eagerly.
bool use_graph(const Config& c, const Device& device) {
  if (c.graph == "off") return false;
  const char* why_not = device.type != DeviceType::cuda ? "it needs a CUDA device"
                        : c.detect_anomaly              ? "--detect-anomaly waits for every op"
                                                        : nullptr;
  if (!why_not) return true;
  KILN_CHECK(c.graph == "auto", ValueError, "--graph on: cannot capture the training step on ", device, ": ", why_not);
  spdlog::debug("training steps run eagerly: {}", why_not);
  return false;
}

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
    return std::make_unique<optim::OneCycleLR>(opt, optim::OneCycleLROptions(c.lr, c.epochs * steps_per_epoch)
                                                        .cycle_momentum(opt.momentum().has_value()));  // not Adadelta's
  return nullptr;  // "none"
}

// --resume's checkpoint and how this run's settings differ from those it was saved with.
struct Resumed {
  apps::LoadedCheckpoint checkpoint;
  std::vector<apps::SettingChange> changes;  // accepted with --allow-setting-changes; else none
  int64_t saved_epochs = 0;                  // the --epochs of the run that saved it
};

// Reads --resume's checkpoint and compares its settings with this run's before any data is read: a
// difference is refused with the list, unless --allow-setting-changes; --model never changes.
std::optional<Resumed> load_resumed(const Config& c, const Parallel& par) {
  if (c.resume.empty()) return std::nullopt;
  Resumed r;
  r.checkpoint = apps::load_checkpoint(c.resume);
  const apps::RunState& s = r.checkpoint.state;
  spdlog::info("resuming {}: epoch {}, batch {}, settings {}", c.resume, s.epoch + 1, s.batch, s.config);
  KILN_CHECK(s.model == c.model, ValueError, "--resume: the checkpoint holds a '", s.model, "' model, but --model is '",
             c.model, "'");
  const nlohmann::ordered_json saved = apps::parse_settings(s.config, c.resume);
  r.saved_epochs = saved.contains("epochs") && saved["epochs"].is_number_integer() ? saved["epochs"].get<int64_t>()
                                                                                  : c.epochs;
  r.changes = apps::changed_settings(saved, c.settings(par.size()));
  std::string list;
  for (const apps::SettingChange& d : r.changes) list += "\n  " + d.flag + ": " + d.saved + " in the checkpoint, " + d.now + " now";
  KILN_CHECK(r.changes.empty() || c.allow_setting_changes, ValueError, "--resume: this command's settings differ from "
             "those the checkpoint was saved with:", list, "\npass them as they were to continue the run exactly, or "
             "add --allow-setting-changes to go on with this command's");
  if (!r.changes.empty()) spdlog::warn("--allow-setting-changes: going on with this command's settings:{}", list);
  KILN_CHECK(s.epoch <= c.epochs, ValueError, "--resume: the checkpoint has trained ", s.epoch, " epochs, more than "
             "--epochs ", c.epochs, " asks for");
  return r;
}

// A resumed run's optimizer and schedule. With the settings it was saved with, exactly as saved:
// the run goes on as if never stopped. Otherwise, this command's hyperparameters over the saved
// optimizer state (a new --optimizer starts afresh), and the schedule rebuilt as this command would
// have it at the checkpoint's step: replayed from the start (host arithmetic, no device work). A
// grown or shrunk --epochs rebuilds the schedules whose shape depends on it (cosine, onecycle), so
// the lr never falls off the end of the old schedule; step and none go on as saved.
void restore_optimizer_and_schedule(Training& t, const Config& c, const Resumed& r, int64_t steps_per_epoch) {
  const auto changed = [&](const std::string& flag) {
    return std::any_of(r.changes.begin(), r.changes.end(), [&](const apps::SettingChange& d) { return d.flag == flag; });
  };
  if (!changed("--optimizer")) {
    optim::StateDict state = r.checkpoint.optimizer;
    if (!r.changes.empty()) {  // this command's hyperparameters, the saved per-parameter state
      const optim::StateDict now = t.optimizer->state_dict();
      for (auto& [key, value] : state)
        if (key.rfind("param_groups.", 0) == 0)
          for (const auto& [now_key, now_value] : now)
            if (now_key == key) value = now_value;
    }
    t.optimizer->load_state_dict(state);
  }
  const bool spans_run = c.scheduler == "cosine" || c.scheduler == "onecycle";
  if (!t.scheduler || (r.changes.empty() && !(spans_run && r.saved_epochs != c.epochs))) {
    if (t.scheduler) t.scheduler->load_state_dict(r.checkpoint.scheduler);
    return;
  }
  t.optimizer->set_lr(c.lr);  // where the schedule starts
  t.scheduler = make_scheduler(c, *t.optimizer, steps_per_epoch);
  const int64_t steps = c.scheduler == "onecycle" ? t.state.epoch * steps_per_epoch + t.state.batch : t.state.epoch;
  for (int64_t i = 0; i < steps; ++i) t.scheduler->step();
  spdlog::warn("the {} schedule is rebuilt for this command's settings (--epochs {}): lr {:.6g} at step {}", c.scheduler,
               c.epochs, t.optimizer->lr(), t.state.step);
}

// Data-parallel ranks draw dropout and augmentation from streams this far apart (in Philox blocks),
// rank r's starting where rank 0's stands plus r of them; rank 0 draws what one process would.
constexpr uint64_t kRankStreamStride = uint64_t{1} << 40;

// Where a resumed run starts inside its epoch, in batches of this run (--batch-size images on each
// of the processes): the checkpoint counts the images of the epoch's order already trained on, so a
// run stopped by Ctrl-C resumes with another process count or batch size when the images divide.
int64_t resume_batch(const Config& c, const apps::RunState& s, const Parallel& par) {
  const int64_t per_step = c.batch_size * par.size();
  const int64_t images = s.epoch_images >= 0 ? s.epoch_images : s.batch * per_step;
  KILN_CHECK(images % per_step == 0, ValueError, "--resume: the checkpoint stopped inside epoch ", s.epoch + 1,
             " after ", images, " images, which this run's steps of ", per_step, " images (", par.size(),
             " process", par.size() == 1 ? "" : "es", " x --batch-size ", c.batch_size,
             ") do not divide: resume with a batch size that divides it, or from a checkpoint saved at an epoch's end");
  return images / per_step;
}

// The model, initialised from --seed, on `device`, with its optimizer and schedule; when resuming,
// with the weights, optimizer and scheduler state and random stream where the checkpoint left them.
// Data-parallel, the model is wrapped in DistributedDataParallel, which starts every rank from rank 0's weights.
Training build_training(const Config& c, const Device& device, int64_t steps_per_epoch,
                        const std::optional<Resumed>& resumed, const Parallel& par) {
  manual_seed(c.seed);
  Training t;
  t.model = apps::make_model(c.model);
  t.model->to(device);
  if (spdlog::should_log(spdlog::level::debug)) spdlog::debug("{}", (std::ostringstream() << *t.model).str());
  t.optimizer = make_optimizer(c, t.model->parameters());
  t.scheduler = make_scheduler(c, *t.optimizer, steps_per_epoch);
  t.state = {c.model, c.settings(par.size()).dump()};
  if (resumed) {
    t.model->load_state_dict(resumed->checkpoint.model);
    t.state = resumed->checkpoint.state;
    t.state.config = c.settings(par.size()).dump();  // this run's settings (--epochs may have grown)
    t.state.batch = resume_batch(c, resumed->checkpoint.state, par);
    KILN_CHECK(t.state.batch <= steps_per_epoch && t.state.step >= t.state.batch, ValueError, "--resume: the checkpoint "
               "stands at batch ", t.state.batch, " of epoch ", t.state.epoch + 1, " after ", t.state.step,
               " steps, but this run's epoch has ", steps_per_epoch, " batches (a checkpoint of other data, or damaged)");
    restore_optimizer_and_schedule(t, c, *resumed, steps_per_epoch);
    default_generator().set_state(t.state.rng_seed, t.state.rng_offset);
  }
  t.net = t.model;
  if (par.group) {
    t.net = std::make_shared<nn::DistributedDataParallel>(t.model, par.group);
    Generator& g = default_generator();
    g.set_state(g.seed(), g.offset() + static_cast<uint64_t>(par.rank()) * kRankStreamStride);
  }
  t.correct = zeros({}, TensorOptions(DType::i32).device(device));
  return t;
}

// ---- train one epoch ----

// The clocks and counts behind one epoch's progress updates.
struct Progress {
  Clock::time_point epoch_start = Clock::now(), window_start = epoch_start;
  int64_t first_batch = 0;  // not 0 when resuming inside the epoch
};

// After batch s.batch of `batches`, `images` trained on (all ranks) since the last update: a
// "train" line in the metrics file and, on stderr, a live bar on a terminal, else a plain line
// every 10th update (every update with -v).
void log_progress(const Config& c, const apps::RunState& s, int64_t batches, double loss, int64_t images,
                  Progress& p, Metrics& metrics) {
  double secs = std::chrono::duration<double>(Clock::now() - p.window_start).count();
  double rate = static_cast<double>(images) / std::max(secs, 1e-9);
  double done = static_cast<double>(s.batch) / static_cast<double>(batches);
  double elapsed = std::chrono::duration<double>(Clock::now() - p.epoch_start).count();
  double eta = static_cast<double>(batches - s.batch) * elapsed / static_cast<double>(s.batch - p.first_batch);
  metrics.write_line(apps::json_line({{"type", "train"},
                                      {"epoch", s.epoch + 1},
                                      {"batch", s.batch},
                                      {"step", s.step},
                                      {"loss", apps::rounded(loss, 6)},
                                      {"images_per_s", apps::rounded(rate, 1)}}));
  if (g_verbosity >= 1) {
    if (g_tty) {
      int filled = static_cast<int>(done * 30);
      std::cerr << fmt::format("\r\033[Kepoch {}/{} [{}{}] {}/{} loss {:.4f}  {:.0f} img/s  ETA {:.0f}s", s.epoch + 1,
                               c.epochs, std::string(static_cast<size_t>(filled), '#'),
                               std::string(static_cast<size_t>(30 - filled), '.'), s.batch, batches, loss, rate, eta)
                << std::flush;
    } else if (g_verbosity >= 2 || s.batch % (c.log_interval * 10) == 0 || s.batch == batches) {
      spdlog::info("epoch {} batch {}/{} loss {:.4f} {:.0f} img/s", s.epoch + 1, s.batch, batches, loss, rate);
    }
  }
  p.window_start = Clock::now();
}

// Whether to stop: Ctrl-C asked to, or a training loss was not finite. Data-parallel, the ranks
// decide together, at the progress updates: a rank that stopped alone would leave the others
// waiting in the next all-reduce. ask() queues the all-reduce of this rank's votes and their read
// beside the losses'; the answers, looked at when the losses are, wait for it.
struct StopVote {
  // data-parallel, once asked: [some rank was interrupted, some rank's losses were not finite]
  std::optional<PendingValues> votes;
  void ask(const Parallel& par, const Tensor& losses) {
    if (!par.group) return;
    Tensor v = stack({interrupted_flag(losses.device()), 1.0 - kiln::min(isfinite(losses))});
    par.group->all_reduce(v, ReduceOp::max);
    votes = v.read_async();
  }
  bool interrupted() const { return votes && votes->get<float>()[0] > 0; }
  bool nonfinite() const { return votes && votes->get<float>()[1] > 0; }
};

// The losses of the steps between two progress updates, landed (`first` the 0-based batch of the
// first of them): a loss that is not finite stops the run with an error naming its step. What
// was saved stays as it was: nothing of this epoch is.
void check_losses(const std::vector<float>& losses, int64_t first, int64_t batches, const apps::RunState& s,
                  const StopVote& vote, const Parallel& par) {
  const std::string stopped = "; training stopped, and --save's checkpoint, if any, is left as the last epoch's "
                              "end saved it (a smaller --lr may help; --detect-anomaly names the op where it began)";
  for (size_t j = 0; j < losses.size(); ++j) {
    if (std::isfinite(losses[j])) continue;
    const int64_t steps_ago = static_cast<int64_t>(losses.size() - 1 - j);
    KILN_FAIL(NonFiniteError, "the training loss is ", std::isnan(losses[j]) ? "NaN" : losses[j] > 0 ? "+inf" : "-inf",
              " at epoch ", s.epoch + 1, ", batch ",
              first + static_cast<int64_t>(j) + 1, " of ", batches, " (step ", s.step - steps_ago, ")",
              par.group ? " on rank " + std::to_string(par.rank()) : std::string(), stopped);
  }
  KILN_CHECK(!vote.nonfinite(), NonFiniteError, "another rank's training loss is not finite at epoch ", s.epoch + 1,
             ", between batches ", first + 1, " and ", first + static_cast<int64_t>(losses.size()),
             " (that rank's error names the step)", stopped);
}

// The steps between two progress updates: their losses, sent to the host at the second without
// waiting, and looked at (settle) one update later or at the epoch's end. A blocking read at each
// update would leave the device idle while the host, woken, launched the next steps.
struct Window {
  std::vector<Tensor> losses;  // eager steps': a step each (a captured step keeps its own: below)
  std::vector<int64_t> sizes;  // the steps' batches' images (this rank's)
  apps::RunState state;        // after the last of them
  StopVote vote;
  PendingValues values;  // the losses on their way to the host, once sent
  // A captured step's losses are the last rows of its ring (CapturedStep::keep): none was copied
  // out of its graph.
  void send(const Parallel& par, const optim::CapturedStep* captured) {
    const Tensor stacked =
        captured ? captured->recent(0, static_cast<int64_t>(sizes.size())) : stack(losses);
    vote.ask(par, stacked);
    values = stacked.read_async();
    losses.clear();
  }
};

struct TrainResult {
  double loss = 0, accuracy = 0;  // over the images of the epoch, each as the model was at its step
  double seconds = 0;
  int64_t images = 0;
};

// Trains on epoch t.state.epoch from batch t.state.batch on (not 0 when resuming inside it). The
// correct predictions accumulate on the device and are read once, at the end; the loss is summed
// here from the losses each progress update reads. Returns nothing when Ctrl-C asked to stop;
// t.state then stands after the last step taken, whose losses have been looked at.
std::optional<TrainResult> train_epoch(Training& t, data::DataLoader& loader, const Config& c, Metrics& metrics,
                                       const Parallel& par) {
  t.net->train();
  loader.set_epoch(t.state.epoch);
  Progress progress{.first_batch = t.state.batch};
  const int64_t batches = loader.num_batches();
  t.correct.zero_();
  double loss_sum = 0;  // the epoch's loss, summed over its images
  int64_t seen = 0;
  // A window's losses, once landed: one that is not finite stops the run; else a progress update.
  auto settle = [&](const Window& w) {
    const std::vector<float> values = w.values.get<float>();
    check_losses(values, w.state.batch - static_cast<int64_t>(values.size()), batches, w.state, w.vote, par);
    int64_t images = 0;
    for (size_t j = 0; j < values.size(); ++j) {
      loss_sum += values[j] * static_cast<double>(w.sizes[j]);
      images += w.sizes[j] * par.size();
    }
    log_progress(c, w.state, batches, values.back(), images, progress, metrics);
  };
  Window open;                  // the steps since the last update
  std::optional<Window> sent;   // the last update's, on its way to the host
  // A captured step's own inputs, by batch size, once it has a graph for them: its graph gathers
  // each batch into them, and given back they are not copied. Before that, a batch's tensors give
  // it the shapes.
  std::map<int64_t, std::vector<Tensor>> own;
  for (int64_t i = t.state.batch; i < batches; ++i) {  // t.state.batch is i during step i
    const int64_t rows = loader.batch_rows(i);
    if (t.captured) {  // its loss is kept in its ring
      auto it = own.find(rows);
      if (it == own.end()) {
        const data::Batch b = loader.batch(i);
        (*t.captured)({b.inputs, b.targets});
        if (std::vector<Tensor> mine = t.captured->inputs_like({b.inputs, b.targets}); !mine.empty())
          own.emplace(rows, std::move(mine));
      } else {
        (*t.captured)(it->second);
      }
    } else {
      open.losses.push_back(train_step(t, loader, {})[0]);
    }
    if (t.scheduler && c.scheduler == "onecycle") t.scheduler->step();  // one-cycle steps per batch
    ++t.state.step;
    t.state.batch = i + 1;
    seen += rows;
    open.sizes.push_back(rows);
    // One process looks at Ctrl-C every step; data-parallel ranks at the updates, where each
    // settles the same window's votes, so all stop after the same step.
    bool stop = !par.group && g_interrupts.load() > 0;
    if ((i + 1) % c.log_interval == 0 || i + 1 == batches || stop) {
      open.state = t.state;
      open.send(par, t.captured.get());
      if (sent) {
        settle(*sent);
        stop = stop || (par.group && sent->vote.interrupted());
      }
      sent = std::move(open);
      open = Window{};
      if (i + 1 == batches || stop) {  // nothing is left in flight at the end, or at a stop
        settle(*sent);
        sent.reset();
      }
    }
    if (stop) return std::nullopt;
  }
  if (t.scheduler && c.scheduler != "onecycle") t.scheduler->step();  // the others step per epoch
  TrainResult r;
  if (seen > 0) {  // data-parallel: every rank trained on as many images (equal shards)
    if (par.group) {  // the ranks' losses summed through the group, which reduces device tensors
      const Tensor summed = full({}, loss_sum, TensorOptions(DType::f32).device(t.correct.device()));
      par.sum(summed);
      loss_sum = summed.item();
    }
    par.sum(t.correct);
    seen *= par.size();
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - progress.epoch_start).count();
  r.images = seen;
  r.loss = seen ? loss_sum / static_cast<double>(seen) : 0.0;
  r.accuracy = seen ? t.correct.item() / static_cast<double>(seen) : 0.0;
  return r;
}

// ---- evaluate ----

struct TestResult {
  double loss = 0, accuracy = 0;
};

// Sum of the loss and count of correct predictions over the test set, and the confusion matrix
// (rows: true digit, columns: predicted), all accumulated on the device and read once; data-parallel,
// each rank's shard of the test set, the sums then added over the ranks.
TestResult test(nn::Module& model, const data::DataLoader& loader, const Device& device,
                std::vector<int64_t>* confusion, const Parallel& par, bool bf16) {
  NoGradGuard no_grad;
  AutocastGuard autocast(DType::bf16, bf16);  // evaluated as it trains
  model.eval();
  Tensor loss_sum = zeros({}, device), correct = zeros({}, TensorOptions(DType::i32).device(device)),
         counts = zeros({100}, device);
  for (const data::Batch& b : loader) {
    Tensor logits = model(b.inputs);
    Tensor l = cross_entropy(logits, b.targets, Reduction::sum);
    Tensor predicted = argmax(logits, 1);
    Tensor c = eq(predicted, b.targets).sum();
    Tensor pairs = one_hot(b.targets * 10 + predicted, 100).sum({0});  // [100]: true * 10 + predicted
    loss_sum = loss_sum + l;
    correct = correct + c;
    counts = counts + pairs;
  }
  par.sum(loss_sum);
  par.sum(correct);
  par.sum(counts);
  auto n = static_cast<double>(loader.dataset_size());
  if (confusion) {
    confusion->clear();
    for (float v : counts.to_vector<float>()) confusion->push_back(static_cast<int64_t>(v));
  }
  return {loss_sum.item() / n, correct.item() / n};
}

// ---- log ----

// The epoch's line on stdout (a progress bar gives way to it) and in the metrics file.
void log_epoch(const Training& t, const TrainResult& train, const TestResult& test, Metrics& metrics) {
  if (!g_rank0) return;
  const long long epoch = t.state.epoch + 1;
  double images_per_s = static_cast<double>(train.images) / std::max(train.seconds, 1e-9);
  if (g_tty && g_verbosity >= 1) std::cerr << "\r\033[K" << std::flush;
  std::cout << fmt::format("epoch {:2}  train loss {:.4f} acc {:.2f}%  test loss {:.4f} acc {:.2f}%  {:.1f} s  {:.0f} img/s  lr {:.4g}",
                           epoch, train.loss, 100 * train.accuracy, test.loss, 100 * test.accuracy, train.seconds,
                           images_per_s, t.optimizer->lr())
            << std::endl;
  metrics.write_line(apps::json_line({{"type", "epoch"},
                                      {"epoch", epoch},
                                      {"train_loss", apps::rounded(train.loss, 6)},
                                      {"train_accuracy", apps::rounded(train.accuracy, 6)},
                                      {"test_loss", apps::rounded(test.loss, 6)},
                                      {"test_accuracy", apps::rounded(test.accuracy, 6)},
                                      {"seconds", apps::rounded(train.seconds, 3)},
                                      {"images_per_s", apps::rounded(images_per_s, 1)},
                                      {"lr", t.optimizer->lr()}}));
}

// The curves of --plot, a point per epoch of this run.
struct History {
  std::vector<double> epochs, train_losses, test_losses, test_accuracies;

  void add(int64_t epoch, const TrainResult& train, const TestResult& test) {
    epochs.push_back(static_cast<double>(epoch));
    train_losses.push_back(train.loss);
    test_losses.push_back(test.loss);
    test_accuracies.push_back(test.accuracy);
  }
};

void plot_history(const std::string& path, const History& h) {
  apps::write_plot_png(path, {{"Loss", "epoch", "cross-entropy",
                               {{"train loss", h.epochs, h.train_losses, apps::plot_blue},
                                {"test loss", h.epochs, h.test_losses, apps::plot_orange}}},
                              {"Test accuracy", "epoch", "accuracy",
                               {{"test accuracy", h.epochs, h.test_accuracies, apps::plot_green}}}});
}

void print_confusion(const std::vector<int64_t>& m) {
  std::cout << "confusion matrix (rows: true digit, columns: predicted)\n      ";
  for (int p = 0; p < 10; ++p) std::cout << fmt::format("{:6}", p);
  std::cout << "\n";
  for (int t = 0; t < 10; ++t) {
    std::cout << fmt::format("{:6}", t);
    for (int p = 0; p < 10; ++p) std::cout << fmt::format("{:6}", m[static_cast<size_t>(t * 10 + p)]);
    std::cout << "\n";
  }
}

// ---- checkpoint ----

// Writes the run, standing at `state`, to --save (when given), with the random stream as it is now;
// data-parallel, rank 0 alone writes (its stream is the one a single process would have drawn).
void save_run(const Config& c, const Training& t, apps::RunState state, const Parallel& par) {
  if (c.save.empty() || !g_rank0) return;
  state.epoch_images = state.batch * c.batch_size * par.size();
  state.rng_seed = default_generator().seed();
  state.rng_offset = default_generator().offset();
  apps::save_checkpoint(c.save, *t.model, *t.optimizer, t.scheduler.get(), state);
  spdlog::info("saved {}", c.save);
}

// After an epoch's test: saved as "epoch done", so that a resume starts the next one.
void save_epoch_end(const Config& c, const Training& t, const Parallel& par) {
  apps::RunState next = t.state;
  ++next.epoch;
  next.batch = 0;
  save_run(c, t, next, par);
}

// Ctrl-C: saved where it stopped, inside the epoch; a resume goes on from the next batch.
int stop_interrupted(const Config& c, const Training& t, const Parallel& par) {
  spdlog::info("interrupted: stopping at a step boundary");
  save_run(c, t, t.state, par);
  if (c.save.empty()) spdlog::info("nothing saved (no --save given)");
  return interrupted_exit_code();
}

// Whether a stop was asked during the epoch's test (or its save): data-parallel, by any rank, the
// ranks deciding together as at the progress updates.
bool interrupted_between_epochs(const Parallel& par) {
  if (!par.group) return g_interrupts.load() > 0;
  Tensor flag = interrupted_flag(par.group->device());
  par.group->all_reduce(flag, ReduceOp::max);
  return flag.item() > 0;
}

// ---- the run ----

int run(const Config& c) {
  auto [device, par] = pick_device_and_group(c);
  set_allow_tf32(c.use_tf32());
  KILN_CHECK(!c.use_bf16() || device.type != DeviceType::vulkan, ValueError, "--precision bf16: the vulkan backend has "
             "no bf16 kernels; train on --device cuda or cpu, or in --precision f32 on vulkan");
  const bool graph = use_graph(c, device);  // before the data: a --graph that cannot be is refused at once
  std::optional<DetectAnomalyGuard> anomaly;
  if (c.detect_anomaly) anomaly.emplace();
  std::optional<Resumed> resumed = load_resumed(c, par);
  spdlog::info("config: {}", c.settings(par.size()).dump());
  if (resumed && resumed->checkpoint.state.epoch == c.epochs) {
    if (g_rank0)
      std::cout << "the checkpoint has finished its " << c.epochs
                << " epochs: nothing left to train (a larger --epochs goes on)" << std::endl;
    return 0;
  }
  prepare_outputs(c);
  Loaders data = load_data(c, device, par);
  Training t = build_training(c, device, data.train.num_batches(), resumed, par);
  t.bf16 = c.use_bf16();
  t.augment = c.augment;
  if (graph) {
    t.captured = std::make_unique<optim::CapturedStep>(
        *t.optimizer, [&t, &data](const std::vector<Tensor>& into) { return train_step(t, data.train, into); });
    // each step's loss kept on the device until the progress update that reads its window
    t.captured->keep(std::min<int64_t>(c.log_interval, data.train.num_batches()));
  }
  Metrics metrics = open_metrics(c, resumed.has_value());
  // the first line of the run, and of each resumed part of it: what ran, where, with which settings
  nlohmann::ordered_json run_line = {{"type", "run"}};
  run_line.update(apps::build_info("mnist-train"));
  run_line.update({{"device", device.str()},
                   {"processes", par.size()},
                   {"resumed", resumed.has_value()},
                   {"settings", c.settings(par.size())}});
  metrics.write_line(apps::json_line(run_line));
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);

  History history;
  std::vector<int64_t> confusion;  // of the latest test
  double best = 0.0;
  Clock::time_point run_start = Clock::now();
  for (; t.state.epoch < c.epochs; ++t.state.epoch, t.state.batch = 0) {
    std::optional<TrainResult> train = train_epoch(t, data.train, c, metrics, par);
    if (!train) return stop_interrupted(c, t, par);
    TestResult r = test(*t.model, data.test, device, &confusion, par, t.bf16);
    KILN_CHECK(std::isfinite(train->loss) && std::isfinite(r.loss), NonFiniteError, "after epoch ",
               t.state.epoch + 1, " the training loss is ", train->loss, " and the test loss ", r.loss,
               ": the weights are no longer finite; training stopped, and --save's checkpoint, if any, is left as "
               "the last epoch's end saved it");
    best = std::max(best, r.accuracy);
    log_epoch(t, *train, r, metrics);
    history.add(t.state.epoch + 1, *train, r);
    save_epoch_end(c, t, par);
    if (!c.plot.empty() && g_rank0) plot_history(c.plot, history);
    if (interrupted_between_epochs(par)) {
      spdlog::info("interrupted: stopped after epoch {}{}", t.state.epoch + 1,
                   c.save.empty() ? " (nothing saved: no --save given)" : ", whose end is saved");
      return interrupted_exit_code();
    }
  }

  double total = std::chrono::duration<double>(Clock::now() - run_start).count();
  if (!g_rank0) return 0;
  if (!confusion.empty()) print_confusion(confusion);
  std::string where = device.str();
  if (par.size() > 1) where += fmt::format(" (rank 0 of {}, {})", par.size(), par.group->name());
  std::cout << fmt::format("best test accuracy {:.2f}%  total {:.1f} s  device {}", 100 * best, total, where) << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  if (const char* env = std::getenv("KILN_DATA")) c.data = env;  // before the flags: --help shows it
  CLI::App app{"mnist-train: trains a digit classifier on MNIST with kiln"};
  add_options(app, c);
  if (std::optional<int> code = apps::parse_command_line(app, argc, argv)) return *code;
  g_verbosity = c.verbosity;
  g_tty = apps::stderr_is_terminal();
  apps::start_logging("mnist-train", c.verbosity);
  try {
    const int code = run(c);
    // The results printed on stdout are output too: a full disk or a closed pipe there is an error.
    KILN_CHECK(std::cout.flush(), IoError, "writing the results to standard output failed");
    return code;
  } catch (const std::exception& e) {
    spdlog::error("{}", apps::error_text(e, c.verbosity >= 2));
    return 1;
  }
}
