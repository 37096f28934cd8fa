// Fuzzes mnist-train's checkpoint reader (apps/mnist/checkpoint.h): safetensors with the run's
// state in its metadata, and two more safetensors files inside it, base64-encoded.
//
// Feeds each input as a checkpoint file to load_model_checkpoint (what mnist-predict --model
// reads) and load_checkpoint (what --resume reads), whose run settings (kiln.config) then go
// through parse_settings and changed_settings as --resume compares them; then all again with the
// header length set to where its JSON ends (safetensors_input.h). Expects a LoadedCheckpoint with
// its counts in range and its settings compared, or one of kiln's errors (SerializationError,
// NonFiniteError, ValueError), and no checkpoint that the full reader takes but the model reader
// refuses. Any other exception, a crash, a sanitizer report, a hang or
// memory past scripts/fuzz's bound is a finding.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "apps/mnist/checkpoint.h"
#include "apps/mnist/train_config.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/safetensors_input.h"

namespace {

// Whether `load` reads the checkpoint at `path`, kiln's errors being a no.
template <class Load>
bool reads(Load load, const std::string& path) {
  try {
    load(path);
    return true;
  } catch (const kiln::Error&) {
    return false;
  }
}

void check_readers(const std::string& bytes) {
  static kiln::fuzz::InputFile file;
  const std::string& path = file.write(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  const bool model_read = reads(kiln::apps::load_model_checkpoint, path);
  const char* broken = nullptr;
  const bool all_read = reads(
      [&](const std::string& p) {
        const kiln::apps::LoadedCheckpoint c = kiln::apps::load_checkpoint(p);
        if (c.state.epoch < 0 || c.state.batch < 0 || c.state.step < 0 || c.state.epoch_images < -1)
          broken = "a count outside its range was accepted";
        const nlohmann::ordered_json saved = kiln::apps::parse_settings(c.state.config, p);
        (void)kiln::apps::changed_settings(saved, kiln::apps::Config{}.settings(1));
      },
      path);
  if (all_read && !model_read) broken = "load_checkpoint read what load_model_checkpoint refused";
  if (broken) {
    std::fprintf(stderr, "fuzz_checkpoint: %s\n", broken);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::read_as_given_and_fixed(data, size, check_readers);
  return 0;
}
