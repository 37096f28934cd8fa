#include "apps/mnist/log.h"

#include <unistd.h>

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "kiln/core/log.h"

namespace kiln::apps {

namespace {

// Standard error, one line a message. The program's own info and debug lines carry no prefix.
class StderrSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  StderrSink(std::string program, bool terminal) : program_(std::move(program)), terminal_(terminal) {}

 private:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const std::string_view name(msg.logger_name.data(), msg.logger_name.size());
    std::string line = terminal_ ? "\r\033[K" : "";  // clears the progress bar
    if (msg.level >= spdlog::level::warn) {
      const spdlog::string_view_t level = spdlog::level::to_string_view(msg.level);
      line.append(name).append(": ").append(level.data(), level.size()).append(": ");
    } else if (name != program_) {
      line.append(name).append(": ");
    }
    line.append(msg.payload.data(), msg.payload.size()).append("\n");
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
  void flush_() override { std::fflush(stderr); }

  std::string program_;
  bool terminal_;
};

// The level of the logger `name`.
spdlog::level::level_enum level_for(int verbosity, const std::string& name) {
  if (verbosity == 0) return spdlog::level::warn;
  if (verbosity >= 2) return spdlog::level::debug;
  const std::optional<logging::Level> level = logging::level_from_environment(name);
  return level ? static_cast<spdlog::level::level_enum>(*level) : spdlog::level::info;
}

}  // namespace

void start_logging(const std::string& program, int verbosity) {
  auto sink = std::make_shared<StderrSink>(program, stderr_is_terminal());
  auto app = std::make_shared<spdlog::logger>(program, sink);
  app->set_level(std::min(level_for(verbosity, program), spdlog::level::err));  // errors decide the exit code: always shown
  app->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(app);

  auto library = std::make_shared<spdlog::logger>("kiln", sink);
  library->set_level(level_for(verbosity, "kiln"));
  library->flush_on(spdlog::level::warn);
  logging::set_logger(library);
}

bool stderr_is_terminal() { return ::isatty(STDERR_FILENO) != 0; }

}  // namespace kiln::apps
