#include "apps/mnist/cli.h"

namespace kiln::apps {

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

}  // namespace kiln::apps
