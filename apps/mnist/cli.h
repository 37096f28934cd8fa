// What mnist-train and mnist-predict share on the command line: printf-style formatting of the
// lines they print, their JSON lines and error text, and CLI11's parse with their exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <cstdio>
#include <exception>
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

// Checks of numeric flags that state the rule in words ("a finite number > 0, got nan") and refuse
// NaN and infinities, which CLI11's own range checks let through (NaN compares false both ways).
CLI::Validator positive_number();      // finite, > 0
CLI::Validator non_negative_number();  // finite, >= 0 (also keeps "-1" from wrapping into an unsigned flag)
CLI::Validator number_in(double lo, double hi);  // finite, lo <= x <= hi
// A path to a regular file (a FIFO would block its reading forever; a directory is no file).
CLI::Validator regular_file();

// One line of JSON (metrics, --json): nlohmann-json writes it, so strings are escaped, a NaN or an
// infinity is null, and the bytes of a file name that are not UTF-8 become U+FFFD.
std::string json_line(const nlohmann::ordered_json& value);
// `v` rounded to `decimals` places: shorter numbers in the JSON lines, as printed before.
double rounded(double v, int decimals);

// What a failure says to the user: a kiln error's message, followed with `verbose` (-v) by where
// the check that threw it is ("(core/tensor.cpp:120)"); any other exception's what().
std::string error_text(const std::exception& e, bool verbose);

// Parses argv into `app`'s options. When the program should stop there, returns its exit code once
// CLI11 has printed what it has to say: 0 after --help or --version, 2 for a usage error. `validate`
// runs after a successful parse and throws CLI::ValidationError for what CLI11's checks cannot see.
// Every flag's values are checked first: true or false, on or off, yes or no, or a count up to 2^32
// (CLI11 2.1 crashed on others, cli.cpp says how).
std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv,
                                      const std::function<void()>& validate = {});

}  // namespace kiln::apps
