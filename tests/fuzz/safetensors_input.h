// What fuzz_safetensors and fuzz_checkpoint share: an input made into a safetensors file whose
// header length fits its JSON.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace kiln::fuzz {

// A safetensors file starts with the length of its JSON header, so nearly every mutation inside
// the header (a name one byte shorter) is refused by the length check alone and the checks behind
// it are never reached. This gives the input with that length set to where its JSON object really
// ends, or nothing when there is no whole object after the first 8 bytes or the length is right.
inline std::optional<std::string> with_header_length_fixed(const std::string& bytes) {
  size_t at = 8;
  while (at < bytes.size() && bytes[at] == ' ') ++at;
  if (at >= bytes.size() || bytes[at] != '{') return std::nullopt;
  int depth = 0;
  bool in_string = false;
  for (; at < bytes.size(); ++at) {
    const char c = bytes[at];
    if (in_string) {
      if (c == '\\') ++at;  // skips the escaped character
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      break;
    }
  }
  if (at >= bytes.size()) return std::nullopt;
  const uint64_t length = at + 1 - 8;
  std::string fixed = bytes;
  for (size_t i = 0; i < 8; ++i) fixed[i] = static_cast<char>(length >> (8 * i));
  if (fixed == bytes) return std::nullopt;
  return fixed;
}

// Gives `read` the input, then the input with its header length fixed when that differs.
template <class Read>
void read_as_given_and_fixed(const uint8_t* data, size_t size, Read read) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  read(bytes);
  if (const std::optional<std::string> fixed = with_header_length_fixed(bytes)) read(*fixed);
}

}  // namespace kiln::fuzz
