// What mnist-train and mnist-predict share on the command line: printf-style formatting of the
// lines they print, and CLI11's parse with their exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>

namespace kiln::apps {

// printf into a std::string (lines longer than 511 characters are cut).
std::string fmt(const char* format, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
}

// Parses argv into `app`'s options. When the program should stop there, returns its exit code once
// CLI11 has printed what it has to say: 0 after --help or --version, 2 for a usage error. `validate`
// runs after a successful parse and throws CLI::ValidationError for what CLI11's checks cannot see.
std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv,
                                      const std::function<void()>& validate = {});

}  // namespace kiln::apps
