// What mnist-train and mnist-predict share on the command line: their JSON lines and error text,
// and CLI11's parse with their exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <exception>
#include <functional>
#include <optional>
#include <string>

namespace kiln::apps {

// Checks of numeric flags that state the rule in words ("a finite number > 0, got nan") and refuse
// NaN and infinities, which CLI11's own range checks let through (NaN compares false both ways).
CLI::Validator positive_number();      // finite, > 0
CLI::Validator non_negative_number();  // finite, >= 0 (also keeps "-1" from wrapping into an unsigned flag)
CLI::Validator number_in(double lo, double hi);  // finite, lo <= x <= hi
// A path to a regular file (a FIFO would block its reading forever; a directory is no file).
CLI::Validator regular_file();

// What --version prints: "mnist-train (kiln) 0.1.0", and "(git 0ba4961d2c3e)" after it when built
// from a git checkout.
std::string version_line(const std::string& program);
// The git revision kiln was built from ("0ba4961d2c3e", with "-dirty" for uncommitted changes), or
// "" when unknown (built from a tarball).
std::string git_revision();
// What a JSON output records of the program that wrote it, first: {"program", "kiln" (the
// version), "revision" (git_revision(), null when unknown), "date" (today, UTC: YYYY-MM-DD)}.
nlohmann::ordered_json build_info(const std::string& program);

// One line of JSON (metrics, --json): nlohmann-json writes it, so strings are escaped, a NaN or an
// infinity is null, and the bytes of a file name that are not UTF-8 become U+FFFD.
std::string json_line(const nlohmann::ordered_json& value);
// Writes `value` to `path` as indented JSON, whole or not at all (write_file_atomically).
void write_json_file(const std::string& path, const nlohmann::ordered_json& value);
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
