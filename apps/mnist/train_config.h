// mnist-train's settings: the Config its flags fill, and the flags themselves (add_options), in
// a file of their own so that other programs (tests, fuzzing) can parse mnist-train's command line
// and --config files exactly as it does.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kiln::apps {

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
  // the arithmetic of matmul and conv2d: "f32" (f32-accurate), "tf32" (CUDA's TF32 tensor cores) or
  // "bf16" (mixed precision under an AutocastGuard: autograd/autocast.h); --tf32 is --precision tf32
  std::string precision = "f32";
  bool tf32 = false;
  // "auto": each training step captured once as a CUDA graph and replayed (optim::CapturedStep)
  // on one CUDA device, eager elsewhere; "on": captured, or an error where it cannot be; "off": eager
  std::string graph = "auto";
  bool use_tf32() const { return tf32 || precision == "tf32"; }
  bool use_bf16() const { return precision == "bf16"; }
  bool detect_anomaly = false;  // check every op's output and gradient (slow; not a setting of the run)
  int64_t log_interval = 10;
  int64_t limit_train = 0;
  int64_t limit_test = 0;
  int64_t augment = 0;  // random translations of up to this many pixels (0: none)
  std::string save, resume, metrics_out, plot;
  int verbosity = 1;  // 0 quiet, 1 normal, 2 verbose
  bool distributed = false;  // also on by itself under mpirun -np N > 1
  bool allow_setting_changes = false;  // --resume goes on with this command's settings where they differ

  // The settings that define a run on `processes` processes: what its checkpoints record
  // (kiln.config), what --resume compares, and what data-parallel ranks must agree on.
  nlohmann::ordered_json settings(int processes) const;
};

// A setting in which a checkpoint and this run differ.
struct SettingChange {
  std::string flag;        // "--lr"; "--batch-size x processes" for the images of a step
  std::string saved, now;  // the values, as text
};

// A checkpoint's settings (kiln.config), as settings() wrote them; ValueError naming `checkpoint`
// when the text is not a JSON object.
nlohmann::ordered_json parse_settings(const std::string& text, const std::string& checkpoint);

// Where `saved` and `now` differ, --epochs aside (a resume may change it: mnist-train rebuilds
// the schedules that span the run). The batch compared is the images of a step, --batch-size x
// processes, so that a run resumes on another number of processes with the same steps. A setting
// that an older checkpoint did not record is not compared.
std::vector<SettingChange> changed_settings(const nlohmann::ordered_json& saved, const nlohmann::ordered_json& now);

// The flags, in the order --help lists them; each writes into `c`, whose values are the defaults.
void add_options(CLI::App& app, Config& c);

}  // namespace kiln::apps
