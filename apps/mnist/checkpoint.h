// mnist-train's checkpoints: one safetensors file that PyTorch loads as a model state dict
// (model.load_state_dict(safetensors.torch.load_file(path)) for the built-in nets), and that
// carries everything else a run needs to continue in its metadata:
//   kiln.format       "mnist-checkpoint/1"
//   kiln.model        cnn | mlp | fast
//   kiln.config       the run's settings (the JSON line mnist-train prints at start)
//   kiln.epoch        the epoch in progress (0-based)
//   kiln.batch        the next batch of that epoch (0 when saved between epochs)
//   kiln.step         optimizer steps taken so far
//   kiln.images       images of the epoch's order trained on (by all processes together), so that a
//                     run stopped inside an epoch resumes with another process count or batch size
//   kiln.rng          seed and offset of the default Philox generator ("seed:offset")
//   kiln.optimizer    the optimizer's state dict, itself a safetensors file, base64-encoded
//   kiln.scheduler    the scheduler's state dict, likewise (absent without a scheduler)
// Optimizer state lives in metadata rather than beside the weights so that PyTorch's strict
// load_state_dict sees the model's keys and nothing else.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "kiln/core/safetensors.h"
#include "kiln/layers/module.h"
#include "kiln/optim/optimizer.h"
#include "kiln/optim/scheduler.h"

namespace kiln::apps {

struct RunState {
  std::string model;
  std::string config;
  int64_t epoch = 0;
  int64_t batch = 0;
  int64_t step = 0;
  int64_t epoch_images = -1;  // -1: not recorded (older checkpoints): batch * this run's batch size
  uint64_t rng_seed = 0, rng_offset = 0;
};

// The first of `tensors` that holds NaN or infinite values, described ("'fc1.weight' holds 3 NaN or
// infinite values of 4608"), or "" when every value is finite.
std::string first_nonfinite(const NamedTensors& tensors);

// Written atomically: an interrupted save leaves the previous checkpoint in place. Weights or
// optimizer state that are not finite are not saved (NonFiniteError): a diverged run never
// replaces a good checkpoint.
void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& optimizer,
                     const optim::LRScheduler* scheduler, const RunState& state);

struct LoadedCheckpoint {
  NamedTensors model;  // the state dict
  RunState state;
  NamedTensors optimizer;
  NamedTensors scheduler;  // empty without one
};

// Throws SerializationError naming the file and the missing or malformed entry, NonFiniteError
// naming a tensor that holds NaN or infinite values.
LoadedCheckpoint load_checkpoint(const std::string& path);

// Only the model's weights and name: what mnist-predict needs.
LoadedCheckpoint load_model_checkpoint(const std::string& path);

}  // namespace kiln::apps
