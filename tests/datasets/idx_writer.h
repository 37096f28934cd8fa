// Test helpers: build IDX files (valid or broken) and gzip them, in a temporary folder.
#pragma once

#include <zlib.h>

#include <bit>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/temp_dir.h"

namespace kiln::test {

using Bytes = std::vector<uint8_t>;

inline void append_big_endian(Bytes& out, uint64_t value, size_t bytes) {
  for (size_t i = bytes; i-- > 0;) out.push_back(static_cast<uint8_t>(value >> (8 * i)));
}

// The IDX magic (0, 0, type, rank) and the dimensions, as the format lays them out.
inline Bytes idx_header(uint8_t type, const std::vector<uint32_t>& dims) {
  Bytes out = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) append_big_endian(out, d, 4);
  return out;
}

inline Bytes idx_file(uint8_t type, const std::vector<uint32_t>& dims, const Bytes& payload) {
  Bytes out = idx_header(type, dims);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

// Values as big-endian elements of their own size (int8_t -> 1 byte, double -> 8).
template <class T>
Bytes big_endian(const std::vector<T>& values) {
  using Bits = std::conditional_t<sizeof(T) == 1, uint8_t,
               std::conditional_t<sizeof(T) == 2, uint16_t,
               std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
  Bytes out;
  for (T v : values) append_big_endian(out, std::bit_cast<Bits>(v), sizeof(T));
  return out;
}

// A valid u8 IDX file whose element i is i * 7 mod 256: the small generator the broken cases start from.
inline Bytes valid_u8(const std::vector<uint32_t>& dims) {
  size_t n = 1;
  for (uint32_t d : dims) n *= d;
  Bytes payload(n);
  for (size_t i = 0; i < n; ++i) payload[i] = static_cast<uint8_t>(i * 7);
  return idx_file(0x08, dims, payload);
}

// One gzip member (10-byte header, deflate data, CRC-32 and length), as gzip(1) writes it.
inline Bytes gzip(const Bytes& data, int level = Z_BEST_SPEED) {
  z_stream z{};
  if (deflateInit2(&z, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("gzip: deflateInit2 failed");
  Bytes out(deflateBound(&z, static_cast<uLong>(data.size())));
  z.next_in = const_cast<Bytef*>(data.data());
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) throw std::runtime_error("gzip: deflate did not finish");
  return out;
}

inline Bytes concat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// `members` gzip members of `bytes` zeros each, one after another: deflate's best level shrinks
// zeros about 1000 times, so a few KB of file inflate to megabytes (a small gzip bomb).
inline Bytes gzip_zeros(size_t members, size_t bytes) {
  const Bytes member = gzip(Bytes(bytes), Z_BEST_COMPRESSION);
  Bytes out;
  out.reserve(members * member.size());
  for (size_t i = 0; i < members; ++i) out.insert(out.end(), member.begin(), member.end());
  return out;
}

}  // namespace kiln::test
