// safetensors: round trips, atomic replacement (and the temporaries of killed saves cleaned), and
// malformed files rejected with the rule named.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "kiln/kiln.h"
#include "kiln/core/safetensors.h"
#include "tests/temp_dir.h"

using namespace kiln;
namespace fs = std::filesystem;
using kiln::test::TempDir;

namespace {

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A file with the given JSON header and `data` after it.
std::string make_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

std::string floats(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

}  // namespace

TEST_CASE("safetensors round trip keeps names, order, dtypes, shapes, values and metadata") {
  TempDir dir;
  Tensor w = arange(0, 6).reshape({2, 3});
  Tensor t = w.t();  // non-contiguous: written row-major
  NamedTensors tensors{{"fc.weight", t},
                       {"x64", from_vector<double>({1.5, -2.25}, {2})},
                       {"labels", from_vector<int32_t>({7, -1, 3}, {3})},
                       {"pixels", from_vector<uint8_t>({0, 255}, {1, 2})},
                       {"scalar", scalar(4.0)},
                       {"empty", zeros({0, 3})}};
  std::string path = dir.file("a.safetensors");
  save_safetensors(path, tensors, {{"epoch", "3"}, {"note", "quote \" and \\ and \n"}});
  SafetensorsFile f = load_safetensors(path);
  REQUIRE(f.tensors.size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    CHECK(f.tensors[i].first == tensors[i].first);
    CHECK(f.tensors[i].second.shape() == tensors[i].second.shape());
    CHECK(f.tensors[i].second.dtype() == tensors[i].second.dtype());
    CHECK(f.tensors[i].second.to_vector<double>() == tensors[i].second.to_vector<double>());
  }
  CHECK(f.metadata.at("epoch") == "3");
  CHECK(f.metadata.at("note") == "quote \" and \\ and \n");
  // The header is padded so the data starts 8-byte aligned.
  std::string bytes = test::read_file(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);
}

TEST_CASE("safetensors reads I64 (PyTorch's integer tensors) as i32 when the values fit") {
  TempDir dir;
  std::string data(16, '\0');
  int64_t v[2] = {5, -9};
  std::memcpy(data.data(), v, 16);
  write_bytes(dir.file("i64"), make_file(R"({"t":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", data));
  Tensor t = load_safetensors(dir.file("i64")).tensors[0].second;
  CHECK(t.dtype() == DType::i32);
  CHECK(t.to_vector<int32_t>() == std::vector<int32_t>{5, -9});
  v[0] = int64_t{1} << 40;
  std::memcpy(data.data(), v, 16);
  write_bytes(dir.file("big"), make_file(R"({"t":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", data));
  CHECK_THROWS_WITH_AS(load_safetensors(dir.file("big")), doctest::Contains("does not fit kiln's i32"),
                       SerializationError);
}

TEST_CASE("saving replaces a file atomically and a failed save leaves the old file intact") {
  TempDir dir;
  std::string path = dir.file("ckpt.safetensors");
  save_safetensors(path, {{"a", ones({3})}});
  std::string before = test::read_file(path);
  // Duplicate names are rejected before anything is written.
  CHECK_THROWS_AS(save_safetensors(path, {{"a", ones({2})}, {"a", ones({2})}}), ValueError);
  CHECK(test::read_file(path) == before);
  // A folder that does not exist cannot take the temporary file.
  CHECK_THROWS_AS(save_safetensors(dir.file("missing/x.safetensors"), {{"a", ones({1})}}), IoError);
  save_safetensors(path, {{"b", zeros({2})}});
  CHECK(load_safetensors(path).tensors[0].first == "b");
  for (const auto& entry : fs::directory_iterator(dir.path()))  // no temporary left behind
    CHECK(entry.path().filename().string().find(".tmp.") == std::string::npos);
}

TEST_CASE("a save removes the temporaries that killed saves of the same file left, and no one else's") {
  TempDir dir;
  // a process that has ended: its PID names no live process (until the system reuses it)
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  char host[256] = {};
  REQUIRE(::gethostname(host, sizeof host - 1) == 0);
  std::string here = host;
  std::replace(here.begin(), here.end(), '.', '_');
  const std::string dead = std::to_string(child), alive = std::to_string(::getppid());
  const std::vector<std::string> stale = {".ckpt.st.tmp." + here + "." + dead, ".ckpt.st.tmp." + dead},
                                 kept = {".ckpt.st.tmp." + here + "." + alive,       // a live process's
                                         ".ckpt.st.tmp.other-host." + dead,          // another machine's
                                         ".other.st.tmp." + here + "." + dead,       // another file's
                                         ".ckpt.st.tmp.notapid"};
  for (const auto& name : stale) std::ofstream(dir.file(name)) << "half a checkpoint";
  for (const auto& name : kept) std::ofstream(dir.file(name)) << "half a checkpoint";
  save_safetensors(dir.file("ckpt.st"), {{"a", ones({2})}});
  for (const auto& name : stale) CHECK_MESSAGE(!fs::exists(dir.file(name)), name);
  for (const auto& name : kept) CHECK_MESSAGE(fs::exists(dir.file(name)), name);
  CHECK(load_safetensors(dir.file("ckpt.st")).tensors.size() == 1);
}

TEST_CASE("malformed safetensors files are rejected with the file, the offset and the rule") {
  TempDir dir;
  const std::string good_header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string two = floats({1, 2});
  struct Case {
    const char* name;
    std::string bytes;
    const char* rule;  // a fragment the message must contain
  };
  std::string huge_length(8, '\0');
  huge_length[6] = 1;  // 2^48
  std::string past_end = make_file(good_header, two);
  past_end[0] = static_cast<char>(200);  // header length beyond the file
  std::vector<Case> cases{
      {"empty", "", "fewer than the 8"},
      {"short", "abc", "fewer than the 8"},
      {"huge header length", huge_length + "{}", "exceeds the 100 MiB limit"},
      {"header past the end", past_end, "runs past the end"},
      {"not an object", make_file("[1,2]", ""), "must be a JSON object"},
      {"broken json", make_file(R"({"w":{"dtype":"F32",)", ""), "expected a JSON string"},
      {"trailing text", make_file(good_header + "x", two), "unexpected text"},
      {"duplicate key", make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", two), "appears twice"},
      {"unknown dtype", make_file(R"({"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", "abcd"), "does not load"},
      {"missing field", make_file(R"({"w":{"dtype":"F32","shape":[2]}})", two), "needs dtype, shape and data_offsets"},
      {"unknown field", make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", two), "unknown field"},
      {"negative dim", make_file(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", two), "negative numbers"},
      {"float dim", make_file(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", two), "whole number"},
      {"size mismatch", make_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", two), "needs 12 bytes"},
      {"reversed offsets", make_file(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", two), "end before they begin"},
      {"gap", make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", two), "back to back"},
      {"overlap", make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", two), "back to back"},
      {"truncated data", make_file(good_header, floats({1})), "truncated"},
      {"trailing data", make_file(good_header, floats({1, 2, 3})), "trailing bytes"},
      {"metadata not strings", make_file(R"({"__metadata__":{"epoch":3}})", ""), "must be a string"},
      {"bad escape", make_file(R"({"w\q":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", two), "unknown escape"},
      {"huge shape", make_file(R"({"w":{"dtype":"F32","shape":[99999999999999],"data_offsets":[0,8]}})", two), "too large"},
  };
  for (const Case& c : cases) {
    std::string path = dir.file(std::string(c.name) + ".safetensors");
    write_bytes(path, c.bytes);
    try {
      (void)load_safetensors(path);
      FAIL_CHECK(c.name, ": was accepted");
    } catch (const SerializationError& e) {
      std::string what = e.what();
      CHECK_MESSAGE(what.find(path) != std::string::npos, c.name, ": ", what);
      CHECK_MESSAGE(what.find(c.rule) != std::string::npos, c.name, ": ", what);
      CHECK_MESSAGE(what.find("byte ") != std::string::npos, c.name, ": ", what);
    }
  }
  CHECK_THROWS_WITH_AS(load_safetensors(dir.file("nope")), doctest::Contains("cannot open"), SerializationError);
}

TEST_CASE("names and shapes that kiln cannot hold are refused as malformed, not by what is made of them") {
  // Each file is in tests/fuzz/corpus/fuzz_safetensors too: an empty name (found by fuzz_safetensors:
  // it was read, and writing it back threw ValueError) and sizes that multiply past int64 beside a
  // zero (read as no data, then the tensor made of it threw ShapeError).
  struct Case {
    const char* name;
    std::string bytes;
    const char* rule;
  };
  const std::vector<Case> cases{
      {"empty name", make_file(R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", floats({1})), "empty name"},
      {"sizes past int64", make_file(R"({"w":{"dtype":"F32","shape":[0,1099511627776,1099511627776],"data_offsets":[0,0]}})", ""),
       "is too large"},
  };
  for (const Case& c : cases)
    CHECK_THROWS_WITH_AS(decode_safetensors(c.bytes, c.name), doctest::Contains(c.rule), SerializationError);
  // A zero beside sizes that fit is an empty tensor.
  SafetensorsFile f =
      decode_safetensors(make_file(R"({"w":{"dtype":"F32","shape":[0,1099511627776],"data_offsets":[0,0]}})", ""));
  CHECK(f.tensors.at(0).second.shape() == Shape{0, int64_t{1} << 40});
}
