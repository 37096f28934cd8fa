#include "apps/mnist/cli.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <filesystem>

#include "git_revision.h"  // made at build time (apps/CMakeLists.txt)
#include "kiln/core/error.h"
#include "kiln/core/file.h"
#include "kiln/kiln.h"

namespace kiln::apps {

namespace {

// A validator of numbers that `ok` accepts, `rule` saying which ("a finite number > 0").
CLI::Validator number_check(std::string rule, std::function<bool(double)> ok) {
  return CLI::Validator(
      [rule, ok](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size()) return "expected " + rule + ", got '" + text + "'";
        if (!std::isfinite(v) || !ok(v)) return "must be " + rule + ", got " + text;
        return "";
      },
      rule);
}

// CLI11 2.1 adds up the values given to a flag (-v, --verbose=2, "verbose = 3" in a config file)
// with std::stoll into an int64, unchecked: a value that std::stoll refuses escaped app.parse as
// std::invalid_argument or std::out_of_range, so `--quiet=abc` ended mnist-train in
// std::terminate, and two huge values overflowed. This check runs on each value first.
CLI::Validator countable_flag_value() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        constexpr int64_t kLargest = int64_t{1} << 32;  // no command line holds 2^31 of them
        try {
          const int64_t count = CLI::detail::to_flag_value(value);
          if (count >= -kLargest && count <= kLargest) return "";
        } catch (const std::exception&) {  // std::invalid_argument, std::out_of_range
        }
        return "expected true or false, on or off, yes or no, or a count up to 2^32, got '" + value + "'";
      },
      "");
}

}  // namespace

CLI::Validator positive_number() {
  return number_check("a finite number > 0", [](double v) { return v > 0; });
}

CLI::Validator non_negative_number() {
  return number_check("a finite number >= 0", [](double v) { return v >= 0; });
}

CLI::Validator number_in(double lo, double hi) {
  return number_check(fmt::format("a number in [{:g}, {:g}]", lo, hi),
                      [lo, hi](double v) { return v >= lo && v <= hi; });
}

std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv, const std::function<void()>& validate) {
  for (CLI::Option* option : app.get_options())
    if (option->get_items_expected_max() == 0) option->check(countable_flag_value());  // the flags
  try {
    app.parse(argc, argv);
    if (validate) validate();
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  return std::nullopt;
}

CLI::Validator regular_file() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        std::error_code ec;
        const std::filesystem::file_status status = std::filesystem::status(path, ec);
        if (!std::filesystem::exists(status)) return "no such file: " + path;
        if (!std::filesystem::is_regular_file(status))
          return "not a regular file (a directory, a FIFO or a device): " + path;
        return "";
      },
      "");  // the option's type name says FILE
}

std::string git_revision() { return KILN_GIT_REVISION; }

std::string version_line(const std::string& program) {
  const std::string revision = git_revision();
  return program + " (kiln) " + KILN_VERSION + (revision.empty() ? "" : " (git " + revision + ")");
}

nlohmann::ordered_json build_info(const std::string& program) {
  const std::string revision = git_revision();
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  return {{"program", program},
          {"kiln", KILN_VERSION},
          {"revision", revision.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(revision)},
          {"date", date}};
}

std::string json_line(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

void write_json_file(const std::string& path, const nlohmann::ordered_json& value) {
  write_file_atomically(path, value.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
}

double rounded(double v, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::isfinite(v) ? std::round(v * scale) / scale : v;
}

std::string error_text(const std::exception& e, bool verbose) {
  const auto* error = dynamic_cast<const Error*>(&e);
  return error && !verbose ? std::string(error->message()) : std::string(e.what());
}

}  // namespace kiln::apps
