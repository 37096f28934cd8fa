// Fuzzes the IDX reader (datasets/idx.h, data::read_idx), raw and gzip'd.
//
// Feeds each input twice: as the file itself (read as gzip when it starts with 1f 8b: the seeds
// hold both kinds), then gzip'd, which carries the same bytes through the inflating path.
// Expects an IdxFile or a data::DataError from each, and, for an input that is not gzip itself,
// the same answer from both: equal dims, type and elements, or both refused. Any other exception,
// a crash, a sanitizer report, a hang or memory past scripts/fuzz's bound is a finding.
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "kiln/datasets/idx.h"
#include "tests/datasets/idx_writer.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

std::optional<kiln::data::IdxFile> read(kiln::fuzz::InputFile& file, const kiln::test::Bytes& bytes) {
  try {
    kiln::data::IdxFile idx = kiln::data::read_idx(file.write(bytes.data(), bytes.size()));
    const kiln::Tensor t = kiln::data::to_tensor(idx);
    if (static_cast<size_t>(t.numel()) * kiln::dtype_size(t.dtype()) != idx.bytes.size()) {
      std::fprintf(stderr, "fuzz_idx: the tensor's size differs from the file's elements\n");
      std::abort();
    }
    return idx;
  } catch (const kiln::data::DataError&) {
    return std::nullopt;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kiln::fuzz::InputFile file;
  const kiln::test::Bytes bytes(data, data + size);
  const std::optional<kiln::data::IdxFile> raw = read(file, bytes);
  if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) return 0;  // gzip already: nothing to compare

  const std::optional<kiln::data::IdxFile> gzipped = read(file, kiln::test::gzip(bytes));
  const bool same = raw.has_value() == gzipped.has_value() &&
                    (!raw || (raw->dims == gzipped->dims && raw->type == gzipped->type &&
                              raw->bytes == gzipped->bytes && !raw->gzip && gzipped->gzip));
  if (!same) {
    std::fprintf(stderr, "fuzz_idx: the file and its gzip'd copy read differently (raw %s, gzip'd %s)\n",
                 raw ? "read" : "refused", gzipped ? "read" : "refused");
    std::abort();
  }
  return 0;
}
