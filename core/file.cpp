#include "kiln/core/file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

namespace kiln {

namespace fs = std::filesystem;

namespace {

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "host";
  std::string s = name;
  std::replace(s.begin(), s.end(), '.', '_');  // the temporary's name splits at dots
  return s;
}

// The temporaries that writes of `target` left behind when they were killed: ".NAME.tmp.HOST.PID"
// (".NAME.tmp.PID" before the host was named) whose process, on this host, is gone. A live
// process's, or another host's on a shared folder, are left alone.
void remove_stale_temporaries(const fs::path& dir, const std::string& target_name, const std::string& host) {
  const std::string prefix = "." + target_name + ".tmp.";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    std::string rest = name.substr(prefix.size());  // "HOST.PID" or "PID"
    if (size_t dot = rest.rfind('.'); dot != std::string::npos) {
      if (rest.substr(0, dot) != host) continue;
      rest = rest.substr(dot + 1);
    }
    if (rest.empty() || rest.size() > 9 ||
        !std::all_of(rest.begin(), rest.end(), [](unsigned char ch) { return std::isdigit(ch) != 0; }))
      continue;
    const auto pid = static_cast<pid_t>(std::stol(rest));
    if (pid <= 0 || pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    fs::remove(entry.path(), ec);
  }
}

// The temporary being written, for remove_temporary_in_progress(): a fixed buffer and a flag,
// which a signal handler may read (no allocation, no locks).
char g_temporary[4096];
std::atomic<bool> g_temporary_in_use{false};

// Marks `temp` as the temporary in progress while it lives (when its path fits the buffer).
class TemporaryInProgress {
 public:
  explicit TemporaryInProgress(const std::string& temp) {
    if (temp.size() >= sizeof g_temporary) return;
    std::memcpy(g_temporary, temp.c_str(), temp.size() + 1);
    g_temporary_in_use.store(true);
  }
  ~TemporaryInProgress() { g_temporary_in_use.store(false); }
  TemporaryInProgress(const TemporaryInProgress&) = delete;
  TemporaryInProgress& operator=(const TemporaryInProgress&) = delete;
};

// Writes all of `bytes`, retrying short writes; false (with errno set) when the system refuses.
bool write_all(int fd, std::string_view bytes) {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = ENOSPC;
      return false;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

// The file that writing `path` replaces: `path` itself, or, through symbolic links, the file they
// name. Refuses what is there but is not a regular file.
fs::path replaced_file(const std::string& path) {
  fs::path p(path);
  std::error_code ec;
  for (int links = 0; fs::is_symlink(fs::symlink_status(p, ec)); ++links) {
    KILN_CHECK(links < 40, IoError, "cannot write '", path, "': more than 40 symbolic links to follow (a loop?)");
    fs::path to = fs::read_symlink(p, ec);
    KILN_CHECK(!ec, IoError, "cannot write '", path, "': reading the symbolic link '", p.string(), "' failed: ",
               ec.message());
    p = to.is_absolute() ? to : p.parent_path() / to;
  }
  const fs::file_status status = fs::status(p, ec);
  const bool linked = p.string() != path;
  KILN_CHECK(!fs::exists(status) || fs::is_regular_file(status), IoError, "cannot write '", path, "': ",
             linked ? "'" : "it", linked ? p.string() : "", linked ? "', which it links to," : "",
             " is not a regular file (a directory, a FIFO or a device); kiln replaces files whole, so it writes only "
             "to regular files and new paths");
  return p;
}

}  // namespace

void write_file_atomically(const std::string& path, std::string_view bytes) {
  const fs::path target = replaced_file(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  KILN_CHECK(fs::is_directory(dir, ec), IoError, "cannot write '", path, "': the folder '", dir.string(),
             "' does not exist");
  const std::string host = host_name();
  remove_stale_temporaries(dir, target.filename().string(), host);
  std::string temp_name = ".";  // appended, not added: GCC 12 warns (-Wrestrict) on "." + a temporary
  temp_name.append(target.filename().string()).append(".tmp.").append(host).append(".");
  temp_name.append(std::to_string(::getpid()));
  const std::string temp = (dir / temp_name).string();
  TemporaryInProgress in_progress(temp);
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  KILN_CHECK(fd >= 0, IoError, "cannot write '", path, "': creating '", temp, "' failed: ", std::strerror(errno));
  auto fail = [&](const char* step) {
    const int reason = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(temp.c_str());
    KILN_FAIL(IoError, "writing '", path, "' failed at ", step, ": ", std::strerror(reason),
              "; the file there, if any, is left as it was");
  };
  if (!write_all(fd, bytes)) fail("the write");
  if (::fsync(fd) != 0) fail("fsync");
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) fail("close");
  if (::rename(temp.c_str(), target.c_str()) != 0) fail("the rename into place");
  // Make the rename itself durable.
  if (int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void remove_temporary_in_progress() noexcept {
  if (g_temporary_in_use.load()) ::unlink(g_temporary);
}

LineFile::LineFile(const std::string& path, bool append) : path_(path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  seekable_ = !fs::exists(status) || fs::is_regular_file(status);
  KILN_CHECK(!fs::is_directory(status), IoError, "cannot write '", path, "': it is a directory");
  const int mode = seekable_ ? (append ? O_APPEND : O_TRUNC) : 0;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | mode, 0644);
  KILN_CHECK(fd_ >= 0, IoError, "cannot write '", path, "': ", std::strerror(errno));
}

LineFile::~LineFile() {
  if (fd_ >= 0) ::close(fd_);
}

LineFile::LineFile(LineFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), seekable_(other.seekable_) {}

LineFile& LineFile::operator=(LineFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    seekable_ = other.seekable_;
  }
  return *this;
}

void LineFile::write_line(std::string_view line) {
  if (fd_ < 0) return;
  std::string whole(line);
  whole += '\n';
  const off_t end = seekable_ ? ::lseek(fd_, 0, SEEK_END) : -1;
  if (write_all(fd_, whole)) return;
  const int reason = errno;
  if (end >= 0 && ::ftruncate(fd_, end) != 0) {
    KILN_FAIL(IoError, "writing '", path_, "' failed: ", std::strerror(reason),
              "; cutting it back to its last whole line failed too: ", std::strerror(errno));
  }
  KILN_FAIL(IoError, "writing '", path_, "' failed: ", std::strerror(reason),
            seekable_ ? "; the file ends at its last whole line" : "");
}

}  // namespace kiln
