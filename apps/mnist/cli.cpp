#include "apps/mnist/cli.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>

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

}  // namespace

CLI::Validator positive_number() {
  return number_check("a finite number > 0", [](double v) { return v > 0; });
}

CLI::Validator non_negative_number() {
  return number_check("a finite number >= 0", [](double v) { return v >= 0; });
}

CLI::Validator number_in(double lo, double hi) {
  return number_check(fmt("a number in [%g, %g]", lo, hi),
                      [lo, hi](double v) { return v >= lo && v <= hi; });
}

std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv, const std::function<void()>& validate) {
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
      "FILE");
}

}  // namespace kiln::apps
