// Fuzzes mnist-train's command line (apps/mnist/train_config.h add_options, CLI11, and
// apps::parse_command_line).
//
// Feeds each input as the arguments after the program's name, split at NUL bytes ("--lr\0" "0.5"
// is two arguments), up to the first NUL NUL: what follows it is the contents of a file that an
// argument "@" names ("--config\0@"). Expects a Config whose values keep the rules of its flags,
// or a CLI::ParseError; see train_command_line.h. Any other exception, a crash, a sanitizer
// report, a hang or memory past scripts/fuzz's bound is a finding.
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/train_command_line.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln::fuzz::mute_iostreams();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kiln::fuzz::InputFile config;
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find(std::string("\0\0", 2));
  const std::string arguments = input.substr(0, split);
  const std::string& config_path =
      split == std::string::npos ? config.write(nullptr, 0)
                                 : config.write(data + split + 2, size - split - 2);

  std::vector<std::string> args;
  for (size_t begin = 0; begin <= arguments.size();) {
    size_t end = arguments.find('\0', begin);
    if (end == std::string::npos) end = arguments.size();
    std::string arg = arguments.substr(begin, end - begin);
    args.push_back(arg == "@" ? config_path : arg);
    begin = end + 1;
  }
  if (args.size() > 256) return 0;  // a longer command line only repeats what a shorter one tries
  kiln::fuzz::parse_train_command_line(args);
  return 0;
}
