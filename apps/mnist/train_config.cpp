#include "apps/mnist/train_config.h"

#include <algorithm>
#include <utility>

#include "apps/mnist/cli.h"
#include "apps/mnist/device.h"
#include "kiln/kiln.h"

namespace kiln::apps {

nlohmann::ordered_json Config::settings(int processes) const {
  return {{"model", model},         {"epochs", epochs},   {"batch_size", batch_size}, {"processes", processes},
          {"optimizer", optimizer}, {"lr", lr},           {"momentum", momentum},     {"weight_decay", weight_decay},
          {"scheduler", scheduler}, {"gamma", gamma},     {"seed", seed},             {"limit_train", limit_train},
          {"augment", augment}};
}

nlohmann::ordered_json parse_settings(const std::string& text, const std::string& checkpoint) {
  nlohmann::ordered_json saved = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  KILN_CHECK(saved.is_object(), ValueError, "--resume: checkpoint '", checkpoint,
             "': its settings (kiln.config) are not a JSON object: ", text);
  return saved;
}

namespace {

std::vector<SettingChange> compare_settings(const nlohmann::ordered_json& saved, const nlohmann::ordered_json& now) {
  std::vector<SettingChange> changes;
  for (const auto& [key, value] : now.items()) {
    if (key == "epochs" || key == "batch_size" || key == "processes" || !saved.contains(key)) continue;
    if (saved[key] != value) {
      std::string flag = "--" + key;
      std::replace(flag.begin(), flag.end(), '_', '-');
      changes.push_back({flag, saved[key].dump(), value.dump()});
    }
  }
  // The images of a step: what the schedule and the epoch's batches are counted in. A damaged
  // checkpoint's counts (1e300, 2^62 x 4) are refused rather than converted or multiplied past int64.
  auto images = [](const nlohmann::ordered_json& s) {
    const nlohmann::ordered_json& b = s.at("batch_size");
    const nlohmann::ordered_json& p = s.contains("processes") ? s.at("processes") : nlohmann::ordered_json(1);
    KILN_CHECK(b.is_number_integer() && p.is_number_integer() && b.get<int64_t>() > 0 && p.get<int64_t>() > 0,
               ValueError, "--resume: the checkpoint's batch_size ", b.dump(), " and processes ", p.dump(),
               " must be whole numbers > 0");
    const int64_t batch = b.get<int64_t>(), processes = p.get<int64_t>();
    int64_t product = 0;
    KILN_CHECK(!__builtin_mul_overflow(batch, processes, &product), ValueError, "--resume: the checkpoint's ",
               batch, " images x ", processes, " processes a step overflow int64");
    return std::pair{product, std::to_string(batch) + " x " + std::to_string(processes)};
  };
  if (saved.contains("batch_size") && images(saved).first != images(now).first)
    changes.push_back({"--batch-size x processes", images(saved).second, images(now).second});
  return changes;
}

}  // namespace

std::vector<SettingChange> changed_settings(const nlohmann::ordered_json& saved, const nlohmann::ordered_json& now) {
  try {
    return compare_settings(saved, now);
  } catch (const nlohmann::json::exception& e) {  // a value of the wrong type in a damaged checkpoint
    KILN_FAIL(ValueError, "--resume: the checkpoint's settings (kiln.config) hold a value of the wrong type: ",
              e.what());
  }
}

void add_options(CLI::App& app, Config& c) {
  app.set_config("--config", "", "read options from a TOML/INI file (flags on the command line win)")
      ->check(regular_file())
      ->type_name("FILE");
  app.allow_config_extras(CLI::config_extras_mode::error);  // a key that is no option is a mistake, not noise
  app.add_option("--data", c.data, "folder with the IDX files (env KILN_DATA)")->type_name("DIR")->capture_default_str();
  app.add_option("--model", c.model, "cnn (PyTorch examples/mnist), mlp (784-128-10) or fast (a smaller CNN)")
      ->type_name("MODEL")
      ->check(CLI::IsMember({"cnn", "mlp", "fast"}))->capture_default_str();
  app.add_option("--epochs", c.epochs, "epochs to train (on --resume it may differ from the checkpoint's: "
                 "cosine and onecycle schedules are then rebuilt for the new total)")->check(positive_number())->capture_default_str();
  app.add_option("--batch-size", c.batch_size, "training batch size (per process when data-parallel)")->check(positive_number())->capture_default_str();
  app.add_option("--test-batch-size", c.test_batch_size, "test batch size")->check(positive_number())->capture_default_str();
  app.add_option("--optimizer", c.optimizer, "sgd, adam, adamw, adadelta or rmsprop")
      ->type_name("NAME")
      ->check(CLI::IsMember({"sgd", "adam", "adamw", "adadelta", "rmsprop"}))->capture_default_str();
  app.add_option("--lr", c.lr, "learning rate")->check(positive_number())->capture_default_str();
  app.add_option("--momentum", c.momentum, "momentum (sgd, rmsprop)")->check(number_in(0, 1))->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay, "weight decay")->check(non_negative_number())->capture_default_str();
  app.add_option("--scheduler", c.scheduler, "step (x gamma each epoch), cosine, onecycle or none")
      ->type_name("NAME")
      ->check(CLI::IsMember({"step", "cosine", "onecycle", "none"}))->capture_default_str();
  app.add_option("--gamma", c.gamma, "learning-rate decay per epoch of the step scheduler")
      ->check(positive_number())->capture_default_str();
  app.add_option("--seed", c.seed, "random seed (init, dropout, shuffling)")
      ->check(non_negative_number())->capture_default_str();
  app.add_option("--device", c.device, "auto, cpu, cuda[:N] or vulkan[:N]")
      ->type_name("DEVICE")
      ->check(check_device_spec)
      ->capture_default_str();
  app.add_flag("--distributed", c.distributed, "train data-parallel over the processes of an mpirun job "
               "(on by itself under mpirun -np N > 1; NCCL on cuda, MPI on cpu)");
  CLI::Option* precision = app.add_option("--precision", c.precision, "arithmetic of matmul and conv2d: f32 "
                                          "(f32-accurate), tf32 (CUDA's TF32 tensor cores: faster, ~7e-4 relative "
                                          "error) or bf16 (mixed precision: bf16 products and activations, f32 weights, "
                                          "loss and optimizer; cuda and cpu)")
                               ->check(CLI::IsMember({"f32", "tf32", "bf16"}))
                               ->type_name("NAME")
                               ->capture_default_str();
  app.add_flag("--tf32", c.tf32, "the same as --precision tf32")->excludes(precision);
  app.add_option("--graph", c.graph, "capture each training step once as a CUDA graph and replay it: auto (on for "
                 "CUDA devices, data-parallel ranks included), on, or off (every kernel launched from the host); the results are the same bits")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->type_name("WHEN")
      ->capture_default_str();
  app.add_flag("--detect-anomaly", c.detect_anomaly, "name the first op whose output or gradient is NaN or "
               "infinite, with its shapes (slow: the host waits for every op)");
  app.add_option("--log-interval", c.log_interval, "batches between progress updates")
      ->check(positive_number())->capture_default_str();
  app.add_option("--limit-train", c.limit_train, "train on the first N images only (0: all)")
      ->check(non_negative_number())->capture_default_str();
  app.add_option("--limit-test", c.limit_test, "test on the first N images only (0: all)")
      ->check(non_negative_number())->capture_default_str();
  app.add_option("--augment", c.augment, "shift training images randomly by up to N pixels (0: off)")
      ->check(number_in(0, 8))->capture_default_str();
  app.add_option("--save", c.save, "write a checkpoint here after every epoch and on Ctrl-C")->type_name("PATH");
  app.add_option("--resume", c.resume, "continue the run saved in this checkpoint, with the same settings (a "
                 "difference is refused and listed); the flags that do not define a run may change (--epochs, "
                 "--device, --data, --test-batch-size, --limit-test, --log-interval, the output files)")
      ->type_name("PATH");
  app.add_flag("--allow-setting-changes", c.allow_setting_changes, "on --resume, go on with this command's settings "
               "where they differ from the checkpoint's (listed as it starts): its hyperparameters with the saved "
               "optimizer state (a new --optimizer starts afresh), the schedule rebuilt; --model cannot change");
  app.add_option("--metrics-out", c.metrics_out, "append JSON lines of metrics to this file")->type_name("PATH");
  app.add_option("--plot", c.plot, "write loss and accuracy curves to this PNG after every epoch")->type_name("PATH");
  app.add_flag("-v,--verbose", [&](int64_t) { c.verbosity = 2; }, "more detail on stderr");
  app.add_flag("-q,--quiet", [&](int64_t) { c.verbosity = 0; }, "no progress on stderr");
  app.set_version_flag("--version", apps::version_line("mnist-train"));
}

}  // namespace kiln::apps
