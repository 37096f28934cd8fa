// Reader for IDX files, the format of MNIST, Fashion-MNIST and KMNIST (yann.lecun.com/exdb/mnist).
//
// Layout, all integers big-endian:
//   bytes 0-1   0x00 0x00
//   byte  2     element type: 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64
//   byte  3     rank R
//   bytes 4..   R dimensions, 4 bytes each (uint32)
//   then        the elements, row-major, prod(dims) of them
//
// The file may be gzip-compressed (as the classic mirrors ship it); gzip is recognised by its
// magic bytes 1f 8b, whatever the file is called, and decompressed in chunks as it is read.
//
// Every type is read, converted to the nearest kiln dtype and to host byte order:
//   u8 -> u8,  i8 / i16 / i32 -> i32,  f32 -> f32,  f64 -> f64.
//
// The reader is strict: each broken rule throws DataError naming the file, the byte offset where
// the rule applies (in the decompressed data for gzip files) and the rule. Beyond the format:
//   - rank is 1 to 4: IDX datasets are labels [N], images [N, H, W] or [N, H, W, C]; a larger
//     fourth byte almost always means the file is not IDX at all.
//   - no dimension is 0: no published IDX dataset is empty, and a 0 is what a writer that died
//     before filling in its header leaves behind.
//   - the payload is at most kMaxIdxPayloadBytes, so a corrupt header fails with a clear message
//     instead of an allocation failure. Below that, memory is taken as the data arrives: a header
//     that declares more than the file holds costs no more than the file, and memory that runs
//     out on the way (a gzip bomb) is an OutOfMemory naming the file, never std::bad_alloc.
//   - nothing may follow the payload, and nothing may follow the gzip stream. Reading stops where
//     the header says the payload ends: a byte after it (in the file, or inflated from the same
//     or a further gzip member) is refused at once, however much more would follow.
//   - a file that ends early says how many bytes its header declares and how many it holds.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/tensor.h"

namespace kiln::data {

// A file that breaks a rule of its format or of a dataset's layout.
class DataError : public kiln::Error {
  using Error::Error;
};

// 16 GiB: larger than any published IDX dataset; a header asking for more is corrupt.
inline constexpr int64_t kMaxIdxPayloadBytes = int64_t{1} << 34;

struct IdxFile {
  std::vector<int64_t> dims;   // e.g. [60000, 28, 28]
  DType type = DType::u8;      // after conversion (see the table above)
  std::vector<uint8_t> bytes;  // the elements, row-major, host byte order, dtype_size(type) each
  bool gzip = false;           // the file was gzip-compressed (offsets then count decompressed bytes)

  int64_t header_bytes() const { return 4 + 4 * static_cast<int64_t>(dims.size()); }
};

IdxFile read_idx(const std::filesystem::path& path);

// The same data as a contiguous tensor on the CPU.
Tensor to_tensor(const IdxFile& idx);
Tensor read_idx_tensor(const std::filesystem::path& path);

}  // namespace kiln::data
