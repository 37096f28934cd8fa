// kiln's log: what the library has to say that is not an error it throws. Warnings (a malformed
// KILN_NUM_THREADS, a Vulkan validation message), faults that a destructor or a dying rank cannot
// throw (a device that fails to go idle at exit, a failed collective ending a rank), and at debug
// level what each backend found when it started (the GPU, its features, the kernels it will use).
//
// It all goes to one spdlog logger named "kiln" (Debian's libspdlog), made on first use with one
// sink, standard error, as "kiln: warning: message", at level info. A program quiets or redirects
// kiln with spdlog's own API on that logger:
//
//   kiln::logging::logger()->set_level(spdlog::level::off);  // or spdlog::get("kiln")->...
//   kiln::logging::logger()->sinks() = {my_sink};             // or kiln::logging::set_logger(mine)
//
// SPDLOG_LEVEL is read for kiln when the logger is made: "SPDLOG_LEVEL=kiln=debug" (kiln alone),
// "SPDLOG_LEVEL=warn" (every logger, kiln too), or both, "off,kiln=debug", as spdlog's load_env_levels
// takes them. A logger that the program registered as "kiln" before kiln's first message is used
// as it is.
//
// This header names spdlog's logger without including spdlog, so <kiln/kiln.h> stays light: a
// program that changes the logger includes <spdlog/spdlog.h> itself.
#pragma once

#include <memory>
#include <optional>
#include <string_view>

namespace spdlog {
class logger;
}

namespace kiln::logging {

// spdlog's levels, in its order (spdlog::level::level_enum has the same values).
enum class Level { trace, debug, info, warn, error, critical, off };

// The logger kiln writes to, registered with spdlog as "kiln".
std::shared_ptr<spdlog::logger> logger();
// Makes `replacement` (not null) the logger kiln writes to; spdlog::get("kiln") finds it too when it is
// named "kiln".
void set_logger(std::shared_ptr<spdlog::logger> replacement);
void set_level(Level level);
Level level();

// One message at each level; cheap when the level is off.
void debug(std::string_view message);
void info(std::string_view message);
void warn(std::string_view message);
void error(std::string_view message);
// Writes out what the logger's sinks hold (before a process ends with _Exit or MPI_Abort).
void flush();

// What a SPDLOG_LEVEL value says of the logger `name`: its own "name=level" entry, else the bare
// level that applies to every logger, else nothing (also for a malformed value, which spdlog ignores
// too).
std::optional<Level> level_from_spec(std::string_view spec, std::string_view name);
// The same of the environment's SPDLOG_LEVEL (nothing when it is unset): what logger() applies to a
// logger it makes, and what a program applies to its own loggers.
std::optional<Level> level_from_environment(std::string_view name);

}  // namespace kiln::logging
