// A fresh folder under the system's temporary folder, removed with everything in it when the
// object goes. Its name is random, so tests and processes running at once never share one.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln::test {

class TempDir {
 public:
  TempDir() {
    const auto seed = std::random_device{}() ^
                      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    path_ = std::filesystem::temp_directory_path() / ("kiln-test-" + std::to_string(seed));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // path()/name, as a string
  std::string file(const std::string& name) const { return (path_ / name).string(); }

  // Writes `bytes` to path()/name (creating sub-folders) and returns the full path.
  std::filesystem::path write(const std::string& name, const std::vector<uint8_t>& bytes) const {
    std::filesystem::path file = path_ / name;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw std::runtime_error("TempDir: cannot write " + file.string());
    return file;
  }

 private:
  std::filesystem::path path_;
};

// The whole of a file, as bytes ("" when it cannot be read).
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace kiln::test
