// Files written whole or not at all (core/file.h): atomic replacement, symbolic links followed,
// non-regular targets refused, and a full disk met with an IoError that loses nothing. A full
// disk is made with RLIMIT_FSIZE, which fails a write past the limit with EFBIG as a full
// filesystem fails it with ENOSPC (SIGXFSZ ignored meanwhile, as the shell's `ulimit -f` needs).
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>

#include "kiln/core/file.h"
#include "tests/temp_dir.h"

using namespace kiln;
namespace fs = std::filesystem;
using kiln::test::TempDir;

namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// While it lives, writes past `bytes` in any file fail as on a full disk.
class DiskFullAt {
 public:
  explicit DiskFullAt(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &old_limit_);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = old_limit_;
    limit.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &limit) == 0);
  }
  ~DiskFullAt() {
    ::setrlimit(RLIMIT_FSIZE, &old_limit_);
    std::signal(SIGXFSZ, old_handler_);
  }
  DiskFullAt(const DiskFullAt&) = delete;
  DiskFullAt& operator=(const DiskFullAt&) = delete;

 private:
  rlimit old_limit_{};
  void (*old_handler_)(int) = SIG_DFL;
};

bool has_temporaries(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().find(".tmp.") != std::string::npos) return true;
  return false;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const IoError& e) {
    return e.what();
  }
  return "(no IoError)";
}

}  // namespace

TEST_CASE("write_file_atomically replaces a file whole and leaves no temporary") {
  TempDir dir;
  write_file_atomically(dir.file("a.txt"), "first");
  CHECK(test::read_file(dir.file("a.txt")) == "first");
  write_file_atomically(dir.file("a.txt"), "second, longer");
  CHECK(test::read_file(dir.file("a.txt")) == "second, longer");
  write_file_atomically(dir.file("a.txt"), "");
  CHECK(test::read_file(dir.file("a.txt")).empty());
  CHECK_FALSE(has_temporaries(dir.path()));
  const std::string missing = error_of([&] { write_file_atomically(dir.file("no/such/folder/a.txt"), "x"); });
  CHECK_MESSAGE(missing.find("does not exist") != std::string::npos, missing);
}

TEST_CASE("a full disk: IoError naming the file, the old file as it was, no temporary left") {
  TempDir dir;
  const std::string old_text(1000, 'o');
  write_file_atomically(dir.file("ckpt"), old_text);
  std::string message;
  {
    DiskFullAt full(4096);
    message = error_of([&] { write_file_atomically(dir.file("ckpt"), std::string(10000, 'n')); });
  }
  CHECK_MESSAGE(message.find(dir.file("ckpt")) != std::string::npos, message);
  CHECK_MESSAGE(message.find("left as it was") != std::string::npos, message);
  CHECK(test::read_file(dir.file("ckpt")) == old_text);
  CHECK_FALSE(has_temporaries(dir.path()));
}

TEST_CASE("a symbolic link is followed: the file it names is replaced, the link stays") {
  TempDir dir;
  fs::create_directories(dir.path() / "real");
  write_text(dir.file("real/ckpt"), "old");
  fs::create_symlink("real/ckpt", dir.path() / "link");  // relative, as `ln -s` makes them
  fs::create_symlink(dir.path() / "link", dir.path() / "link2");  // a chain, absolute
  write_file_atomically(dir.file("link2"), "new");
  CHECK(fs::is_symlink(dir.path() / "link"));
  CHECK(fs::is_symlink(dir.path() / "link2"));
  CHECK(test::read_file(dir.file("real/ckpt")) == "new");
  CHECK_FALSE(has_temporaries(dir.path() / "real"));
  // A dangling link: the file it names is created.
  fs::create_symlink("real/later", dir.path() / "dangling");
  write_file_atomically(dir.file("dangling"), "made");
  CHECK(test::read_file(dir.file("real/later")) == "made");
  // A loop is an error, not a hang.
  fs::create_symlink("loop-b", dir.path() / "loop-a");
  fs::create_symlink("loop-a", dir.path() / "loop-b");
  const std::string loop = error_of([&] { write_file_atomically(dir.file("loop-a"), "x"); });
  CHECK_MESSAGE(loop.find("symbolic links") != std::string::npos, loop);
}

TEST_CASE("a directory, a FIFO or a device is not replaced") {
  TempDir dir;
  fs::create_directories(dir.path() / "folder");
  REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);
  fs::create_symlink("/dev/null", dir.path() / "to-null");
  for (const std::string& target : {dir.file("folder"), dir.file("fifo"), std::string("/dev/null"), dir.file("to-null")}) {
    const std::string message = error_of([&] { write_file_atomically(target, "x"); });
    CHECK_MESSAGE(message.find("not a regular file") != std::string::npos, target, ": ", message);
  }
  CHECK(fs::is_directory(dir.path() / "folder"));
  CHECK(fs::is_fifo(dir.path() / "fifo"));
  CHECK(fs::is_character_file("/dev/null"));
  CHECK_FALSE(has_temporaries(dir.path()));
}

TEST_CASE("LineFile writes whole lines; a full disk cuts the file back to its last whole line") {
  TempDir dir;
  {
    LineFile log(dir.file("m.jsonl"), false);
    log.write_line("{\"a\":1}");
    log.write_line("{\"b\":2}");
  }
  CHECK(test::read_file(dir.file("m.jsonl")) == "{\"a\":1}\n{\"b\":2}\n");
  {
    LineFile log(dir.file("m.jsonl"), true);  // appends
    log.write_line("{\"c\":3}");
  }
  CHECK(test::read_file(dir.file("m.jsonl")) == "{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n");
  LineFile fresh(dir.file("m.jsonl"), false);  // starts afresh
  const std::string line(100, 'x');
  std::string message;
  {
    DiskFullAt full(1050);  // room for 10 lines of 101 bytes and part of the 11th
    message = error_of([&] {
      for (int i = 0; i < 20; ++i) fresh.write_line(line);
    });
  }
  CHECK_MESSAGE(message.find(dir.file("m.jsonl")) != std::string::npos, message);
  CHECK_MESSAGE(message.find("last whole line") != std::string::npos, message);
  const std::string text = test::read_file(dir.file("m.jsonl"));
  CHECK(text.size() == 10 * 101);
  CHECK(text.back() == '\n');
  const std::string device = error_of([] {
    LineFile full("/dev/full", true);
    full.write_line("x");
  });
  CHECK_MESSAGE(device.find("/dev/full") != std::string::npos, device);
  CHECK_MESSAGE(device.find("No space left on device") != std::string::npos, device);
}

namespace {
extern "C" void remove_and_exit(int) {
  remove_temporary_in_progress();
  ::_exit(42);
}
}  // namespace

TEST_CASE("a process ended by a signal during a write can leave no temporary behind") {
  TempDir dir;
  const std::string target = dir.file("big");
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGUSR1, remove_and_exit);
    write_file_atomically(target, std::string(size_t{256} << 20, 'x'));  // 256 MB: long enough to be caught
    ::_exit(0);
  }
  bool seen = false;
  for (int waited_ms = 0; waited_ms < 60000 && !seen; waited_ms += 1) {
    seen = has_temporaries(dir.path());
    if (!seen) ::usleep(1000);
  }
  ::kill(child, SIGUSR1);
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE(seen);
  CHECK_MESSAGE(WIFEXITED(status), "the child ended by signal ", WTERMSIG(status));
  if (WEXITSTATUS(status) == 0) MESSAGE("the write finished before the signal: nothing to remove");
  else CHECK(WEXITSTATUS(status) == 42);
  CHECK_FALSE(has_temporaries(dir.path()));
  CHECK_FALSE((fs::exists(target) && WEXITSTATUS(status) == 42));
}
