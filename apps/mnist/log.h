// The apps' log: results go to stdout as plain lines; everything else goes to stderr through spdlog.
// That covers what a run is doing, warnings, errors, and what kiln's own logger says.
#pragma once

#include <string>

namespace kiln::apps {

// Makes the logger named `program` spdlog's default, so spdlog::info(...) writes through it.
// kiln's logger then writes through the same sink. Lines read as "message" for the program's info
// and debug, "kiln: message" for kiln's, and "NAME: warning: message" (or error) at warn level and
// above. On a terminal, each line first clears the progress bar that mnist-train draws.
//
// Levels: `verbosity` 0 (-q) shows warnings and errors, 1 adds info, and 2 (-v) adds debug, for
// both loggers. SPDLOG_LEVEL ("kiln=debug", "mnist-train=warn", "debug") applies when neither -q
// nor -v is given. The program's errors show at every level.
void start_logging(const std::string& program, int verbosity);

// Whether stderr is a terminal: progress there is a live bar that other lines clear first.
bool stderr_is_terminal();

}  // namespace kiln::apps
