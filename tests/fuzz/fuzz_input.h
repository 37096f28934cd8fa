// What the harnesses share: the fuzzer's bytes as a file, for readers that take a path.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace kiln::fuzz {

// A file in memory (memfd), rewritten for each input and named /proc/self/fd/N. To stat it is a
// regular file, as kiln's readers require; nothing touches the disk, and no temporary is left
// behind when the fuzzer stops at a crash.
class InputFile {
 public:
  InputFile() : fd_(::memfd_create("kiln-fuzz-input", MFD_CLOEXEC)) {
    if (fd_ < 0) {
      std::perror("fuzz: memfd_create");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // Replaces the file's contents with `size` bytes at `data`; returns its path.
  const std::string& write(const uint8_t* data, size_t size) {
    bool ok = ::ftruncate(fd_, 0) == 0;
    for (size_t done = 0; ok && done < size;) {
      const ssize_t n = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      ok = n > 0;
      done += ok ? static_cast<size_t>(n) : 0;
    }
    if (!ok) {
      std::perror("fuzz: writing the input file");
      std::abort();
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

}  // namespace kiln::fuzz
