// Files kiln writes: whole, or not at all. A checkpoint, a plot or any file replaced at once goes
// through write_file_atomically; a log that grows a line at a time (JSON Lines metrics) through
// LineFile. Both check every write, so a full disk or a missing permission is an IoError naming
// the file and the reason, never a short file that looks finished.
#pragma once

#include <string>
#include <string_view>

#include "kiln/core/error.h"

namespace kiln {

// Writes `bytes` to `path` so that a reader, or a crash, sees the old file or the new one, never a
// mix: a temporary beside it (".NAME.tmp.HOST.PID"), flushed to the disk, renamed over `path`, then
// the folder flushed. The target must be a regular file or absent: a directory, a FIFO or a
// device is refused, since renaming over it would replace it. A symbolic link is followed: the
// file it names is replaced and the link stays. The folder must exist. Temporaries of earlier
// writes of `path` that were killed (their process gone from this host) are removed first.
// Throws IoError naming `path`, the step that failed and the reason ("No space left on device");
// the file at `path` is then as it was and no temporary is left.
void write_file_atomically(const std::string& path, std::string_view bytes);

// Removes the temporary of a write_file_atomically in progress, if any. Async-signal-safe: for a
// signal handler that ends the process at once (a second Ctrl-C during a save), so that nothing
// is left behind.
void remove_temporary_in_progress() noexcept;

// A file of lines, each written whole: open it, then write_line() as often as needed. A write that
// fails part way (a full disk) is cut back to the end of the last whole line before IoError is
// thrown, so a JSON Lines file stays valid at every moment. Regular files are truncated (or, with
// `append`, added to); a FIFO or a character device (/dev/stderr) is written as a stream.
class LineFile {
 public:
  LineFile() = default;
  LineFile(const std::string& path, bool append);
  ~LineFile();
  LineFile(LineFile&& other) noexcept;
  LineFile& operator=(LineFile&& other) noexcept;
  LineFile(const LineFile&) = delete;
  LineFile& operator=(const LineFile&) = delete;

  bool is_open() const { return fd_ >= 0; }
  // Writes `line` and a newline; nothing when no file is open.
  void write_line(std::string_view line);

 private:
  std::string path_;
  int fd_ = -1;
  bool seekable_ = false;  // a regular file, which a failed write can be cut back in
};

}  // namespace kiln
