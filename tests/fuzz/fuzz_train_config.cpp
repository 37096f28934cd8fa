// Fuzzes mnist-train's --config files (TOML or INI, read by CLI11 through the options of
// apps/mnist/train_config.h).
//
// Feeds each input as the contents of the file that `mnist-train --config FILE` reads. Expects a
// Config whose values keep the rules of its flags, or a CLI::ParseError; see train_command_line.h.
// Any other exception, a crash, a sanitizer report, a hang or memory past scripts/fuzz's bound is
// a finding.
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/train_command_line.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln::fuzz::mute_iostreams();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kiln::fuzz::InputFile config;
  kiln::fuzz::parse_train_command_line({"--config", config.write(data, size)});
  return 0;
}
