#include "kiln/core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>

#include "kiln/core/error.h"

namespace kiln::logging {

namespace {

constexpr const char* kName = "kiln";

std::mutex g_mutex;
std::shared_ptr<spdlog::logger> g_logger;  // guarded by g_mutex; made by logger() on first use

std::string_view trimmed(std::string_view s) {
  constexpr std::string_view kSpaces = " \n\r\t";
  const size_t first = s.find_first_not_of(kSpaces);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(kSpaces) - first + 1);
}

// kiln's logger when the program registered none: standard error, "kiln: warning: message", the
// level in colour on a terminal.
std::shared_ptr<spdlog::logger> make_logger() {
  auto made = spdlog::stderr_color_mt(kName);  // registers it
  made->set_pattern("%n: %^%l%$: %v");
  if (std::optional<Level> level = level_from_environment(kName))
    made->set_level(static_cast<spdlog::level::level_enum>(*level));
  return made;
}

void write(Level level, std::string_view message) {
  const std::shared_ptr<spdlog::logger> l = logger();
  l->log(static_cast<spdlog::level::level_enum>(level), "{}", message);
}

}  // namespace

std::shared_ptr<spdlog::logger> logger() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_logger) {
    g_logger = spdlog::get(kName);  // the program's own "kiln", registered before kiln's first message
    if (!g_logger) g_logger = make_logger();
  }
  return g_logger;
}

void set_logger(std::shared_ptr<spdlog::logger> replacement) {
  KILN_CHECK(replacement != nullptr, ValueError, "kiln::logging::set_logger: the logger is null");
  std::lock_guard<std::mutex> lock(g_mutex);
  if (replacement->name() == kName) {
    spdlog::drop(kName);
    spdlog::register_logger(replacement);
  }
  g_logger = std::move(replacement);
}

void set_level(Level level) { logger()->set_level(static_cast<spdlog::level::level_enum>(level)); }

Level level() { return static_cast<Level>(logger()->level()); }

void debug(std::string_view message) { write(Level::debug, message); }
void info(std::string_view message) { write(Level::info, message); }
void warn(std::string_view message) { write(Level::warn, message); }
void error(std::string_view message) { write(Level::error, message); }
void flush() { logger()->flush(); }

std::optional<Level> level_from_spec(std::string_view spec, std::string_view name) {
  if (spec.size() > 512) return std::nullopt;  // as spdlog's load_levels
  std::optional<Level> bare, named;
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view entry = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    const size_t equals = entry.find('=');
    const std::string_view key = equals == std::string_view::npos ? std::string_view{} : trimmed(entry.substr(0, equals));
    std::string value(trimmed(equals == std::string_view::npos ? entry : entry.substr(equals + 1)));
    std::transform(value.begin(), value.end(), value.begin(),
                   [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; });
    const spdlog::level::level_enum level = spdlog::level::from_str(value);
    if (level == spdlog::level::off && value != "off") continue;  // not a level: ignored, as spdlog does
    if (key.empty()) bare = static_cast<Level>(level);
    else if (key == name) named = static_cast<Level>(level);
  }
  return named ? named : bare;
}

std::optional<Level> level_from_environment(std::string_view name) {
  const char* env = std::getenv("SPDLOG_LEVEL");
  return level_from_spec(env ? env : "", name);
}

}  // namespace kiln::logging
