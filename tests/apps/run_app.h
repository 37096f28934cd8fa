// Running a built program from a test, as a user's shell would: how it ended and what it printed;
// and stopping one with a signal once it has got somewhere (Ctrl-C, SIGTERM, kill -9).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <string>

#include "tests/temp_dir.h"

namespace kiln::test {

struct Result {
  int code;         // the exit code, or 128 + N for a process ended by signal N (as a shell says)
  std::string out;  // stdout and stderr together
};

inline int shell_exit_code(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return -1;
}

// Runs `command` under /bin/sh, its stdout and stderr into one log.
inline Result run_shell(const std::string& command) {
  TempDir dir;
  const int status = std::system((command + " > '" + dir.file("log") + "' 2>&1").c_str());
  return {shell_exit_code(status), read_file(dir.file("log"))};
}

// Starts `command` under /bin/sh, polls `ready` every 2 ms until it says yes, then sends `signal`
// and waits for the end. A command that ends first (or after two minutes unready, signalled
// anyway) is returned as it ended. Polling what the program writes, rather than waiting a fixed
// time, keeps a slow or busy machine from racing its start.
inline Result run_and_signal(const std::string& command, const std::function<bool()>& ready, int signal) {
  TempDir dir;
  const std::string cmd = "exec " + command + " > '" + dir.file("log") + "' 2>&1";
  const pid_t pid = ::fork();
  if (pid < 0) return {-1, "fork failed"};
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  bool exited = false;
  for (int waited_ms = 0; waited_ms < 120000 && !exited; waited_ms += 2) {
    if (::waitpid(pid, &status, WNOHANG) == pid) exited = true;
    else if (ready()) break;
    else ::usleep(2000);
  }
  if (!exited) {
    ::kill(pid, signal);
    ::waitpid(pid, &status, 0);
  }
  return {shell_exit_code(status), read_file(dir.file("log"))};
}

}  // namespace kiln::test
