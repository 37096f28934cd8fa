#include "kiln/datasets/idx.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <system_error>

#include "kiln/core/backend.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

constexpr size_t kInputChunk = size_t{1} << 16;    // compressed bytes read from disk at a time
constexpr size_t kPayloadChunk = size_t{1} << 20;  // payload bytes read per step

std::string dims_str(const std::vector<int64_t>& dims) { return Shape(dims).str(); }

std::string bytes_str(uint64_t n) { return std::to_string(n) + (n == 1 ? " byte" : " bytes"); }

std::string hex(uint8_t byte) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%02X", unsigned{byte});
  return text;
}

// Hands out a file's bytes in order, inflating them on the fly when the file starts with the gzip
// magic 1f 8b. offset() is the position in the IDX data: the decompressed data for gzip files.
class ByteReader {
 public:
  explicit ByteReader(const fs::path& path) : name_(path.string()) {
    std::error_code ec;
    fs::file_status status = fs::status(path, ec);
    KILN_CHECK(fs::exists(status), DataError, name_, ": cannot open: no such file");
    KILN_CHECK(fs::is_regular_file(status), DataError, name_,
               ": cannot open: not a regular file (a directory, a FIFO or a device)");
    file_size_ = fs::file_size(path, ec);
    file_.reset(std::fopen(name_.c_str(), "rb"));
    KILN_CHECK(file_ != nullptr, DataError, name_, ": cannot open for reading: ",
               std::strerror(errno));

    uint8_t magic[2] = {};
    gzip_ = read_file(magic, 2) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    std::rewind(file_.get());
    file_pos_ = 0;
    if (gzip_) {
      in_.resize(kInputChunk);
      // 16 + MAX_WBITS: a gzip wrapper (header, CRC-32 and length checked) around deflate data.
      KILN_CHECK(inflateInit2(&z_, 16 + MAX_WBITS) == Z_OK, DataError, name_,
                 ": zlib could not start inflating (", z_.msg ? z_.msg : "out of memory?", ")");
    }
  }
  ~ByteReader() {
    if (gzip_) inflateEnd(&z_);
  }
  ByteReader(const ByteReader&) = delete;
  ByteReader& operator=(const ByteReader&) = delete;

  bool gzip() const { return gzip_; }
  const std::string& name() const { return name_; }
  uint64_t offset() const { return offset_; }
  uint64_t file_size() const { return file_size_; }

  // How many bytes the data should hold in all, once the header has said so: a truncated gzip
  // stream then reports how far it got against it.
  void declare(uint64_t total) { declared_ = total; }

  // "name: at byte offset 12" (+ " of the decompressed data"): how every IDX-level error starts.
  std::string at(uint64_t offset) const {
    return detail::concat(name_, ": at byte offset ", offset,
                          gzip_ ? " of the decompressed data" : "");
  }

  // Reads up to n bytes; fewer only at the end of the data.
  size_t read(uint8_t* dst, size_t n) {
    size_t got = gzip_ ? inflate_into(dst, n) : read_file(dst, n);
    offset_ += got;
    return got;
  }

 private:
  size_t read_file(uint8_t* dst, size_t n) {
    size_t got = std::fread(dst, 1, n, file_.get());
    KILN_CHECK(!std::ferror(file_.get()), DataError, name_, ": read error at file byte offset ",
               file_pos_ + got, ": ", std::strerror(errno));
    file_pos_ += got;
    return got;
  }

  uint64_t compressed_offset() const { return file_pos_ - z_.avail_in; }

  // Keeps the unread compressed bytes and appends the next chunk of the file; false at its end.
  bool refill() {
    if (z_.avail_in > 0) std::memmove(in_.data(), z_.next_in, z_.avail_in);
    size_t got = read_file(in_.data() + z_.avail_in, in_.size() - z_.avail_in);
    z_.next_in = in_.data();
    z_.avail_in += static_cast<uInt>(got);
    return got > 0;
  }

  size_t inflate_into(uint8_t* dst, size_t n) {
    z_.next_out = dst;
    z_.avail_out = static_cast<uInt>(n);
    while (z_.avail_out > 0 && !stream_done_) {
      if (z_.avail_in == 0)
        KILN_CHECK(refill(), DataError, name_,
                   ": truncated gzip stream: the compressed data ends at byte offset ", file_pos_,
                   " before the stream does, after ", offset_ + (n - z_.avail_out),
                   " decompressed bytes",
                   declared_ ? detail::concat(" of the ", declared_, " that the IDX header declares")
                             : "",
                   " (an interrupted download?)");
      int rc = inflate(&z_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        end_of_member();
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {  // Z_BUF_ERROR: needs more input, refilled above
        std::string why = z_.msg ? z_.msg : "zlib error";
        if (why == "incorrect data check") why = "CRC-32 mismatch (incorrect data check)";
        if (why == "incorrect length check") why = "length mismatch (incorrect length check)";
        KILN_FAIL(DataError, name_, ": corrupt gzip data near compressed byte offset ",
                  compressed_offset(), ": ", why);
      }
    }
    return n - z_.avail_out;
  }

  // inflate has checked the member's CRC-32 and length. gzip allows members to be concatenated
  // (`cat a.gz b.gz`), so another one may follow; anything else is garbage.
  void end_of_member() {
    if (z_.avail_in < 2) refill();
    if (z_.avail_in == 0) {
      stream_done_ = true;
    } else if (z_.avail_in >= 2 && z_.next_in[0] == 0x1f && z_.next_in[1] == 0x8b) {
      inflateReset(&z_);
    } else {
      KILN_FAIL(DataError, name_, ": garbage after the gzip stream: ",
                bytes_str(file_size_ - compressed_offset()),
                " that are not another gzip member follow its end at compressed byte offset ",
                compressed_offset());
    }
  }

  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };

  std::string name_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  uint64_t file_size_ = 0;
  uint64_t file_pos_ = 0;  // bytes read from the file so far
  uint64_t offset_ = 0;    // bytes handed out so far
  uint64_t declared_ = 0;  // bytes the data should hold in all; 0 until the header is read
  bool gzip_ = false;
  z_stream z_{};
  std::vector<uint8_t> in_;  // the compressed chunk being inflated
  bool stream_done_ = false;
};

// The IDX element types, and the kiln dtype each becomes.
struct IdxType {
  uint8_t code;
  const char* name;
  size_t size;  // bytes per element in the file
  DType dtype;
};
constexpr IdxType kIdxTypes[] = {
    {0x08, "u8", 1, DType::u8},   {0x09, "i8", 1, DType::i32},  {0x0B, "i16", 2, DType::i32},
    {0x0C, "i32", 4, DType::i32}, {0x0D, "f32", 4, DType::f32}, {0x0E, "f64", 8, DType::f64},
};
constexpr int kMaxRank = 4;

template <size_t N> struct uint_of;
template <> struct uint_of<1> { using type = uint8_t; };
template <> struct uint_of<2> { using type = uint16_t; };
template <> struct uint_of<4> { using type = uint32_t; };
template <> struct uint_of<8> { using type = uint64_t; };

uint64_t load_big_endian(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

// Big-endian `Stored` elements -> host-order `Out` elements.
template <class Stored, class Out>
std::vector<uint8_t> convert(const std::vector<uint8_t>& raw) {
  using Bits = typename uint_of<sizeof(Stored)>::type;
  size_t count = raw.size() / sizeof(Stored);
  std::vector<uint8_t> out(count * sizeof(Out));
  for (size_t i = 0; i < count; ++i) {
    auto bits = static_cast<Bits>(load_big_endian(&raw[i * sizeof(Stored)], sizeof(Stored)));
    auto value = static_cast<Out>(std::bit_cast<Stored>(bits));
    std::memcpy(&out[i * sizeof(Out)], &value, sizeof(Out));
  }
  return out;
}

std::vector<uint8_t> to_host(uint8_t code, std::vector<uint8_t> raw) {
  switch (code) {
    case 0x09: return convert<int8_t, int32_t>(raw);
    case 0x0B: return convert<int16_t, int32_t>(raw);
    case 0x0C: return convert<int32_t, int32_t>(raw);
    case 0x0D: return convert<float, float>(raw);
    case 0x0E: return convert<double, double>(raw);
    default: return raw;  // u8: no byte order
  }
}

}  // namespace

IdxFile read_idx(const fs::path& path) {
  ByteReader in(path);
  IdxFile idx;
  idx.gzip = in.gzip();

  uint8_t magic[4] = {};
  size_t got = in.read(magic, 4);
  KILN_CHECK(got == 4, DataError, in.at(got), ": too short for the 4-byte IDX magic (the data holds ",
             got, " bytes)");
  KILN_CHECK(magic[0] == 0 && magic[1] == 0, DataError, in.at(0),
             ": bad magic: an IDX file starts with two zero bytes, this one with ", hex(magic[0]),
             " ", hex(magic[1]), " (not an IDX file?)");

  const IdxType* type = nullptr;
  for (const IdxType& t : kIdxTypes)
    if (t.code == magic[2]) type = &t;
  KILN_CHECK(type != nullptr, DataError, in.at(2), ": unknown IDX type code ", hex(magic[2]),
             " in the magic; known: 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64");

  int rank = magic[3];
  KILN_CHECK(rank >= 1 && rank <= kMaxRank, DataError, in.at(3), ": rank ", rank,
             " in the magic; kiln reads IDX files of rank 1 to ", kMaxRank);

  std::vector<uint8_t> header(4 * static_cast<size_t>(rank));
  got = in.read(header.data(), header.size());
  KILN_CHECK(got == header.size(), DataError, in.at(in.offset()), ": truncated header: rank ", rank,
             " needs ", header.size(), " bytes of dimensions after the magic, only ", got,
             " are there");

  for (int i = 0; i < rank; ++i) {
    auto d = static_cast<int64_t>(load_big_endian(&header[4 * static_cast<size_t>(i)], 4));
    KILN_CHECK(d >= 1, DataError, in.at(4 + 4 * static_cast<uint64_t>(i)), ": dimension ", i,
               " is 0; every dimension must be at least 1");
    idx.dims.push_back(d);
  }

  // Count the elements, stopping at the limit so that the product never overflows.
  const int64_t max_elements = kMaxIdxPayloadBytes / static_cast<int64_t>(type->size);
  int64_t elements = 1;
  for (int64_t d : idx.dims) {
    KILN_CHECK(d <= max_elements / elements, DataError, in.at(4), ": the dimensions ",
               dims_str(idx.dims), " of ", type->name, " elements exceed the limit of ",
               kMaxIdxPayloadBytes, " payload bytes (16 GiB); the header is corrupt");
    elements *= d;
  }

  const uint64_t payload_start = in.offset();
  const auto expected = static_cast<size_t>(elements) * type->size;
  const std::string layout = detail::concat("the dimensions ", dims_str(idx.dims), " of ", type->name);
  in.declare(payload_start + expected);

  // Grow the buffer as data arrives, never past `expected`: a header that lies about the size
  // costs no memory, and a file that holds what it declares costs what it holds. Memory running
  // out on the way (a large file, or a small gzip file that inflates to gigabytes) is reported
  // as such, not as std::bad_alloc.
  uint64_t held = 0;
  try {
    std::vector<uint8_t> payload;
    payload.reserve(std::min(expected, size_t{64} << 20));
    while (payload.size() < expected) {
      size_t old = payload.size();
      size_t want = std::min(kPayloadChunk, expected - old);
      if (payload.capacity() < old + want)
        payload.reserve(std::min(expected, std::max(old + want, 2 * payload.capacity())));
      payload.resize(old + want);
      got = in.read(payload.data() + old, want);
      payload.resize(old + got);
      held = payload.size();
      KILN_CHECK(got == want, DataError, in.at(in.offset()), ": truncated payload: ", layout, " need ",
                 expected, " bytes after the header (from byte offset ", payload_start,
                 "), the data holds ", payload.size());
    }
    idx.bytes = to_host(type->code, std::move(payload));
  } catch (const std::bad_alloc&) {
    KILN_FAIL(OutOfMemory, in.name(), ": out of memory holding the payload: ", layout, " make ",
              expected, " bytes, and an allocation failed after ", held, " of them were read");
  }

  // Nothing may follow the payload. One more byte is asked for, not the rest, so that data after
  // the payload is refused at once however much of it there is (further gzip members may
  // inflate to gigabytes). The request also runs gzip's CRC check of the last member and its
  // look for bytes after the stream.
  uint8_t next = 0;
  if (in.read(&next, 1) > 0) {
    const uint64_t end = payload_start + expected;
    KILN_FAIL(DataError, in.at(end), ": over-long: ",
              in.gzip() ? "the decompressed data goes on" : bytes_str(in.file_size() - end),
              " after the end of the payload (", layout, " make ", expected, " bytes from byte offset ",
              payload_start, ")");
  }

  idx.type = type->dtype;
  return idx;
}

Tensor to_tensor(const IdxFile& idx) {
  Tensor t = empty(Shape(idx.dims), TensorOptions(idx.type));
  t.backend().write(t.storage()->data(), 0, idx.bytes.data(), idx.bytes.size());
  return t;
}

Tensor read_idx_tensor(const fs::path& path) { return to_tensor(read_idx(path)); }

}  // namespace kiln::data
