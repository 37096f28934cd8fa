// The IDX reader: round trips of every type, raw and gzip, and one case per rule a file can break.
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <new>

#include "kiln/datasets/idx.h"
#include "idx_writer.h"

using namespace kiln;
using namespace kiln::data;
using namespace kiln::test;

namespace {

// Reads `file` expecting a DataError; checks that the message names the file and holds every word.
void check_rejected(const std::filesystem::path& file, const std::vector<std::string>& words) {
  std::string message;
  try {
    read_idx(file);
  } catch (const DataError& e) {
    message = e.what();
  }
  INFO("file: ", file.filename().string(), "\nmessage: ", message);
  REQUIRE_MESSAGE(!message.empty(), "read_idx accepted a broken file");
  CHECK(message.find(file.filename().string()) != std::string::npos);
  for (const std::string& word : words) {
    CAPTURE(word);
    CHECK(message.find(word) != std::string::npos);
  }
}

template <class T>
void check_round_trip(const TempDir& dir, const std::string& name, uint8_t code,
                      const std::vector<uint32_t>& dims, const std::vector<T>& values, DType dtype) {
  Bytes raw = idx_file(code, dims, big_endian(values));
  Bytes compressed = gzip(raw);
  struct Variant {
    std::string file;
    const Bytes& bytes;
    bool gzip;
  };
  // gzip is told by its magic bytes, not the name: the last two files lie about it.
  for (const Variant& v : {Variant{name + ".idx", raw, false}, Variant{name + ".idx.gz", compressed, true},
                           Variant{name + "-gzip.idx", compressed, true}, Variant{name + "-raw.gz", raw, false}}) {
    CAPTURE(v.file);
    IdxFile idx = read_idx(dir.write(v.file, v.bytes));
    CHECK(idx.dims == std::vector<int64_t>(dims.begin(), dims.end()));
    CHECK(idx.type == dtype);
    CHECK(idx.gzip == v.gzip);
    CHECK(idx.header_bytes() == 4 + 4 * static_cast<int64_t>(dims.size()));
    Tensor t = to_tensor(idx);
    CHECK(t.shape() == Shape(std::vector<int64_t>(dims.begin(), dims.end())));
    CHECK(t.dtype() == dtype);
    // every IDX value is exact as a double
    const std::vector<double> expected(values.begin(), values.end());
    CHECK(t.to_vector<double>() == expected);
  }
}

// Runs read_idx(file) in a child process whose address space may grow by only `headroom` bytes,
// and returns what it threw: "OutOfMemory: <message>", "DataError: <message>", "std::bad_alloc",
// "another exception" or "nothing".
std::string read_idx_with_memory_limit(const TempDir& dir, const std::filesystem::path& file,
                                       size_t headroom) {
  const std::string result = dir.file("result");
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::string what = "nothing";
    size_t pages = 0;
    std::ifstream("/proc/self/statm") >> pages;  // the address space's size, in pages
    const rlim_t limit = pages * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE)) + headroom;
    const rlimit bound = {limit, limit};
    if (pages == 0 || ::setrlimit(RLIMIT_AS, &bound) != 0) ::_exit(2);
    try {
      read_idx(file);
    } catch (const OutOfMemory& e) {
      what = std::string("OutOfMemory: ") + e.what();
    } catch (const DataError& e) {
      what = std::string("DataError: ") + e.what();
    } catch (const std::bad_alloc&) {
      what = "std::bad_alloc";
    } catch (...) {
      what = "another exception";
    }
    std::ofstream(result) << what;
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0), "the child could not limit its memory");
  std::ifstream in(result);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// ASan reserves its shadow memory up front and aborts when an allocation fails past RLIMIT_AS,
// so the memory-limit case cannot run under it.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

}  // namespace

TEST_CASE("IDX: every type reads back, raw and gzip, converted to host order") {
  TempDir dir;
  check_round_trip<uint8_t>(dir, "u8", 0x08, {2, 3}, {0, 1, 127, 128, 200, 255}, DType::u8);
  check_round_trip<int8_t>(dir, "i8", 0x09, {4}, {-128, -1, 0, 127}, DType::i32);
  check_round_trip<int16_t>(dir, "i16", 0x0B, {2, 2}, {-32768, -2, 300, 32767}, DType::i32);
  check_round_trip<int32_t>(dir, "i32", 0x0C, {3, 1},
                            {std::numeric_limits<int32_t>::min(), -5, 0x01020304}, DType::i32);
  check_round_trip<float>(dir, "f32", 0x0D, {1, 2, 2}, {1.5f, -0.25f, 3e38f, -0.0f}, DType::f32);
  check_round_trip<double>(dir, "f64", 0x0E, {2, 1, 1, 2}, {1e300, -2.5, 1.0 / 3.0, 0.0}, DType::f64);
}

TEST_CASE("IDX: read_idx_tensor gives a CPU tensor") {
  TempDir dir;
  Tensor t = read_idx_tensor(dir.write("images.idx", valid_u8({2, 2, 3})));
  CHECK(t.device() == Device::cpu());
  CHECK(t.shape() == Shape{2, 2, 3});
  CHECK(t.to_vector<uint8_t>() == std::vector<uint8_t>{0, 7, 14, 21, 28, 35, 42, 49, 56, 63, 70, 77});
}

TEST_CASE("IDX: a large gzip file crosses many read chunks; concatenated gzip members are one stream") {
  TempDir dir;
  // 1.5 MB of noise that deflate cannot shrink: many 64 KiB input chunks and 1 MiB payload steps.
  Bytes payload(3 * 500 * 1000);
  uint32_t state = 12345;
  for (uint8_t& b : payload) {
    state = state * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(state >> 24);
  }
  Bytes raw = idx_file(0x08, {3, 500, 1000}, payload);
  IdxFile big = read_idx(dir.write("big.gz", gzip(raw)));
  CHECK(big.bytes == payload);

  // `cat a.gz b.gz` is a valid gzip file: the data continues across the member boundary.
  Bytes first(raw.begin(), raw.begin() + 700001);
  Bytes second(raw.begin() + 700001, raw.end());
  IdxFile joined = read_idx(dir.write("joined.gz", concat(gzip(first), gzip(second))));
  CHECK(joined.bytes == payload);
}

TEST_CASE("IDX: files that cannot be opened") {
  TempDir dir;
  check_rejected(dir.path() / "missing.idx", {"cannot open", "no such file"});
  std::filesystem::create_directories(dir.path() / "folder.idx");
  check_rejected(dir.path() / "folder.idx", {"cannot open", "not a regular file"});
}

TEST_CASE("IDX: broken headers and payloads, raw and gzip") {
  TempDir dir;
  const Bytes good = valid_u8({2, 3});  // 12-byte header, payload at offsets 12..17
  const Bytes zgood = gzip(good);
  const std::string end_of_zgood = "compressed byte offset " + std::to_string(zgood.size());
  Bytes short_payload(good.begin(), good.end() - 1);
  Bytes over_long = concat(good, {0xAB});
  Bytes second_byte = good;
  second_byte[1] = 0x01;
  std::vector<float> three_floats = {1, 2, 3};
  Bytes partial_element = idx_file(0x0D, {3}, big_endian(three_floats));
  partial_element.resize(partial_element.size() - 2);
  const uint32_t max32 = 0xFFFFFFFF;

  struct Case {
    std::string name;
    Bytes bytes;
    std::vector<std::string> words;
  };
  const Case cases[] = {
      {"empty.idx", {}, {"too short", "4-byte IDX magic", "offset 0", "holds 0 bytes"}},
      {"three_bytes.idx", {0, 0, 8}, {"too short", "magic", "offset 3"}},
      {"text.idx", {'h', 'e', 'l', 'l', 'o', '\n'},
       {"bad magic", "two zero bytes", "0x68 0x65", "offset 0"}},
      {"second_byte.idx", second_byte, {"bad magic", "0x00 0x01", "offset 0"}},
      {"type_07.idx", idx_header(0x07, {1}), {"unknown IDX type code 0x07", "offset 2"}},
      {"type_0A.idx", idx_header(0x0A, {1}), {"unknown IDX type code 0x0A", "offset 2"}},
      {"rank_0.idx", idx_header(0x08, {}), {"rank 0", "1 to 4", "offset 3"}},
      {"rank_5.idx", idx_header(0x08, {1, 1, 1, 1, 1}), {"rank 5", "1 to 4", "offset 3"}},
      {"short_header.idx", {0, 0, 8, 3, 0, 0, 0, 2, 0, 0},
       {"truncated header", "rank 3", "12 bytes", "offset 10"}},
      {"zero_dim.idx", idx_header(0x08, {2, 0, 3}), {"dimension 1 is 0", "at least 1", "offset 8"}},
      {"huge.idx", idx_header(0x08, {65536, 65536, 65536}),
       {"exceed the limit", "[65536, 65536, 65536]", "offset 4"}},
      {"overflow.idx", idx_header(0x0E, {max32, max32, max32, max32}),
       {"exceed the limit", "f64", "offset 4"}},
      {"short_payload.idx", short_payload, {"truncated payload", "need 6 bytes", "holds 5", "offset 17"}},
      {"partial_element.idx", partial_element,
       {"truncated payload", "of f32 need 12 bytes", "holds 10", "offset 18"}},
      {"header_only.idx", idx_header(0x08, {4}),
       {"truncated payload", "need 4 bytes", "holds 0", "offset 8"}},
      {"over_long.idx", over_long, {"over-long", "1 byte after the end of the payload", "offset 18"}},
      // gzip-level damage
      {"two_bytes.gz", {0x1f, 0x8b}, {"truncated gzip stream", "offset 2"}},
      {"gzip_header_only.gz", Bytes(zgood.begin(), zgood.begin() + 10),
       {"truncated gzip stream", "offset 10"}},
      {"truncated.gz", Bytes(zgood.begin(), zgood.end() - 5), {"truncated gzip stream", "offset"}},
      {"bad_method.gz", concat({0x1f, 0x8b, 0x07}, Bytes(zgood.begin() + 3, zgood.end())),
       {"corrupt gzip", "unknown compression method", "compressed byte offset"}},
      {"bad_block.gz", concat(Bytes(zgood.begin(), zgood.begin() + 10), Bytes(20, 0xFF)),
       {"corrupt gzip", "invalid block type", "near compressed byte offset"}},
      {"garbage_after.gz", concat(zgood, {'j', 'u', 'n', 'k'}),
       {"garbage after the gzip stream", "4 bytes", end_of_zgood}},
      {"one_byte_after.gz", concat(zgood, {0x1f}),
       {"garbage after the gzip stream", "1 byte", end_of_zgood}},
      // IDX-level damage inside a sound gzip stream: offsets count decompressed bytes
      {"gz_empty.gz", gzip({}), {"too short", "magic", "offset 0 of the decompressed data"}},
      {"gz_text.gz", gzip({'h', 'i', '!', '!'}), {"bad magic", "offset 0 of the decompressed data"}},
      {"gz_short_payload.gz", gzip(short_payload),
       {"truncated payload", "holds 5", "offset 17 of the decompressed data"}},
      {"gz_over_long.gz", gzip(over_long), {"over-long", "offset 18 of the decompressed data"}},
      {"gz_zero_dim.gz", gzip(idx_header(0x08, {0})),
       {"dimension 0 is 0", "offset 4 of the decompressed data"}},
  };
  for (const Case& c : cases) check_rejected(dir.write(c.name, c.bytes), c.words);

  // A flipped bit in the stored CRC-32 or length (the last 8 bytes of a member), and in the data.
  Bytes crc = zgood, length = zgood, data = gzip(valid_u8({64, 64}));
  crc[crc.size() - 8] ^= 0x01;
  length[length.size() - 4] ^= 0x01;
  data[data.size() / 2] ^= 0x10;
  check_rejected(dir.write("crc.gz", crc), {"corrupt gzip", "CRC-32 mismatch", "compressed byte offset"});
  check_rejected(dir.write("length.gz", length),
                 {"corrupt gzip", "length mismatch", "compressed byte offset"});
  check_rejected(dir.write("flipped_data.gz", data), {"corrupt gzip", "compressed byte offset"});
}

TEST_CASE("IDX: reading stops at the size the header declares; data after it is refused at once") {
  TempDir dir;
  const Bytes good = valid_u8({2, 3});  // the payload ends at byte offset 18
  // 4 MiB of zeros in further gzip members (4 KB of file), then bytes that are not gzip: a reader
  // that went on to the end would inflate it all, then report the garbage at the end.
  const Bytes members = concat(concat(gzip(good), gzip_zeros(4, size_t{1} << 20)), {'j', 'u', 'n', 'k'});
  check_rejected(dir.write("members.gz", members),
                 {"over-long", "the decompressed data goes on after the end of the payload",
                  "offset 18 of the decompressed data"});
  // The same 4 MiB inside the payload's own member, whose CRC-32 (checked at its end) is broken.
  Bytes same = gzip(concat(good, Bytes(size_t{4} << 20)), Z_BEST_COMPRESSION);
  same[same.size() - 8] ^= 0x01;
  check_rejected(dir.write("same_member.gz", same), {"over-long", "offset 18 of the decompressed data"});
}

TEST_CASE("IDX: truncated and lying files say how many bytes the header declares and how many are there") {
  TempDir dir;
  const Bytes whole = gzip(valid_u8({64, 64}));  // 12 + 4096 bytes once inflated
  check_rejected(dir.write("half.gz", Bytes(whole.begin(), whole.begin() + std::ssize(whole) / 2)),
                 {"truncated gzip stream", "decompressed bytes of the 4108 that the IDX header declares"});
  // A header declaring almost 16 GiB over 1000 bytes of data: refused when the data ends, having
  // held no more than the data.
  check_rejected(dir.write("liar.gz", gzip(concat(idx_header(0x08, {65535, 256, 1024}), Bytes(1000)))),
                 {"truncated payload", "need 17179607040 bytes", "holds 1000"});
}

TEST_CASE("IDX: a gzip bomb that inflates past the memory there is gives OutOfMemory, not std::bad_alloc" *
          doctest::skip(kAddressSanitizer)) {
  TempDir dir;
  // Declares 128 MiB and inflates to them from 128 KB of gzip members; the reader may take 96 MiB
  // more, so the first 64 MiB fit and the buffer that would hold them all does not.
  const Bytes bomb = concat(gzip(idx_header(0x08, {128, 1024, 1024})), gzip_zeros(128, size_t{1} << 20));
  const std::string what = read_idx_with_memory_limit(dir, dir.write("bomb.gz", bomb), size_t{96} << 20);
  INFO(what);
  CHECK(what.starts_with("OutOfMemory: "));
  CHECK(what.find("bomb.gz: out of memory holding the payload") != std::string::npos);
  CHECK(what.find("make 134217728 bytes") != std::string::npos);
  CHECK(what.find("after 67108864 of them were read") != std::string::npos);
}
