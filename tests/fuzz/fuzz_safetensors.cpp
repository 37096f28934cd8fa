// Fuzzes the safetensors reader (core/safetensors.h, decode_safetensors), in memory.
//
// Feeds each input as the bytes of a safetensors file, then again with its header length set to
// where its JSON ends (safetensors_input.h), so that mutations of the header reach the checks
// behind the length. Expects a SafetensorsFile or a SerializationError; what was read must survive
// a round trip through kiln's writer: encoded and decoded again, the same names, dtypes, shapes,
// values and metadata (the second encoding equals the first byte for byte). Any other exception, a
// crash, a sanitizer report, a hang or memory past scripts/fuzz's bound is a finding.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kiln/core/safetensors.h"
#include "tests/fuzz/safetensors_input.h"

namespace {

void check_round_trip(const std::string& bytes) {
  kiln::SafetensorsFile file;
  try {
    file = kiln::decode_safetensors(bytes, "input");
  } catch (const kiln::SerializationError&) {
    return;
  }
  const std::string once = kiln::encode_safetensors(file.tensors, file.metadata);
  const kiln::SafetensorsFile again = kiln::decode_safetensors(once);
  if (kiln::encode_safetensors(again.tensors, again.metadata) != once || again.metadata != file.metadata) {
    std::fprintf(stderr, "fuzz_safetensors: what was read changed in a round trip through the writer\n");
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::read_as_given_and_fixed(data, size, check_round_trip);
  return 0;
}
