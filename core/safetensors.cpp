#include "kiln/core/safetensors.h"


#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>

#include "kiln/core/backend.h"
#include "kiln/core/file.h"

namespace kiln {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the reference implementation's limit

// ---- a strict JSON reader for the header (objects, arrays, strings, non-negative integers) ----

struct Json {
  enum class Kind { object, array, string, integer } kind = Kind::object;
  struct Member;  // a key and its value (a std::pair would need Json complete here: clang refuses it)
  std::vector<Member> members;                         // object, in file order
  std::vector<Json> items;                             // array
  std::string text;                                    // string
  uint64_t number = 0;                                 // integer
  size_t at = 0;                                       // where it starts, in bytes from the file start
};
struct Json::Member {
  std::string key;
  Json value;
};

class JsonReader {
 public:
  JsonReader(const std::string& file, const std::string& text, size_t base)
      : file_(file), text_(text), base_(base) {}

  Json document() {
    skip_space();
    if (peek() != '{') fail("the header must be a JSON object");
    Json doc = value(0);
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the header's JSON object");
    return doc;
  }

 private:
  [[noreturn]] void fail(const std::string& rule) const {
    KILN_FAIL(SerializationError, "safetensors file '", file_, "', byte ", base_ + pos_, ": ", rule);
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\r' || text_[pos_] == '\t'))
      ++pos_;
  }
  void expect(char c) {
    skip_space();
    if (peek() != c) fail(std::string("expected '") + c + "' in the JSON header");
    ++pos_;
  }

  Json value(int depth) {
    if (depth > 8) fail("the JSON header nests too deeply");
    skip_space();
    Json v;
    v.at = base_ + pos_;
    char c = peek();
    if (c == '{') {
      v.kind = Json::Kind::object;
      ++pos_;
      skip_space();
      if (peek() == '}') return ++pos_, v;
      std::set<std::string> seen;
      while (true) {
        skip_space();
        std::string key = string();
        if (!seen.insert(key).second) fail("the key '" + key + "' appears twice");
        expect(':');
        v.members.push_back({std::move(key), value(depth + 1)});
        skip_space();
        if (peek() == ',') { ++pos_; continue; }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Json::Kind::array;
      ++pos_;
      skip_space();
      if (peek() == ']') return ++pos_, v;
      while (true) {
        v.items.push_back(value(depth + 1));
        skip_space();
        if (peek() == ',') { ++pos_; continue; }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Json::Kind::string;
      v.text = string();
      return v;
    }
    if (c >= '0' && c <= '9') {
      v.kind = Json::Kind::integer;
      while (peek() >= '0' && peek() <= '9') {
        auto digit = static_cast<uint64_t>(peek() - '0');
        if (v.number > (std::numeric_limits<uint64_t>::max() - digit) / 10) fail("an integer overflows 64 bits");
        v.number = v.number * 10 + digit;
        ++pos_;
      }
      if (peek() == '.' || peek() == 'e' || peek() == 'E') fail("expected a whole number");
      return v;
    }
    fail(c == '-' ? "negative numbers have no place in a safetensors header"
                  : "expected a JSON object, array, string or whole number");
  }

  std::string string() {
    if (peek() != '"') fail("expected a JSON string");
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) fail("a JSON string is not terminated");
      char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("a control character inside a JSON string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) fail("a JSON string ends in an escape");
      char e = text_[pos_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          if (pos_ + 4 > text_.size()) fail("a \\u escape needs four hex digits");
          unsigned code = 0;
          for (int i = 0; i < 4; ++i) {
            char h = text_[pos_++];
            code <<= 4;
            if (h >= '0' && h <= '9') code |= static_cast<unsigned>(h - '0');
            else if (h >= 'a' && h <= 'f') code |= static_cast<unsigned>(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F') code |= static_cast<unsigned>(h - 'A' + 10);
            else fail("a \\u escape needs four hex digits");
          }
          // UTF-8 encode (surrogate pairs are not needed for tensor names; reject them)
          if (code >= 0xD800 && code <= 0xDFFF) fail("surrogate \\u escapes are not supported");
          if (code < 0x80) out += static_cast<char>(code);
          else if (code < 0x800) {
            out += static_cast<char>(0xC0 | (code >> 6));
            out += static_cast<char>(0x80 | (code & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (code >> 12));
            out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (code & 0x3F));
          }
          break;
        }
        default: fail(std::string("unknown escape \\") + e + " in a JSON string");
      }
    }
  }

  const std::string& file_;
  const std::string& text_;
  size_t base_;
  size_t pos_ = 0;
};

std::string json_escape(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else out += c;
  }
  return out + "\"";
}

const char* safetensors_dtype(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::i32: return "I32";
    case DType::u8: return "U8";
    case DType::bf16: return "BF16";
  }
  return "?";
}

}  // namespace

// ---- writing ----

std::string encode_safetensors(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata,
                               const std::string& path) {
  std::set<std::string> names;
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) header += ',';
      header.append(json_escape(k)).append(":").append(json_escape(v));
      first = false;
    }
    header += "}";
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    KILN_CHECK(!name.empty() && name != "__metadata__" && names.insert(name).second, ValueError,
               "safetensors '", path, "': tensor names must be unique, non-empty and not "
               "__metadata__ (got '", name, "')");
    uint64_t bytes = static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype());
    if (header.size() > 1) header += ',';
    header.append(json_escape(name)).append(":{\"dtype\":\"").append(safetensors_dtype(t.dtype()));
    header.append("\",\"shape\":[");
    for (size_t i = 0; i < t.shape().size(); ++i) {
      if (i) header += ',';
      header.append(std::to_string(t.shape()[i]));
    }
    header.append("],\"data_offsets\":[").append(std::to_string(offset)).append(",");
    header.append(std::to_string(offset + bytes)).append("]}");
    offset += bytes;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned

  std::string out(8, '\0');
  for (size_t i = 0; i < 8; ++i) out[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  out.reserve(8 + header.size() + offset);
  out += header;
  for (const auto& [name, t] : tensors) {
    size_t bytes = static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
    size_t at = out.size();
    out.resize(at + bytes);
    const Tensor c = t.is_contiguous() ? t : dense_copy(t, t.dtype());  // laid out in order first
    if (bytes > 0)
      c.backend().read(c.storage()->data(), static_cast<size_t>(c.offset()) * dtype_size(c.dtype()), out.data() + at, bytes);
  }
  return out;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  write_file_atomically(path, encode_safetensors(tensors, metadata, path));
}

// ---- reading ----

SafetensorsFile load_safetensors(const std::string& path) {
  // A FIFO or a device would block the read or never end it: regular files only.
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  KILN_CHECK(std::filesystem::exists(status), SerializationError, "cannot open safetensors file '", path,
             "': no such file");
  KILN_CHECK(std::filesystem::is_regular_file(status), SerializationError, "cannot open safetensors file '", path,
             "': not a regular file (a directory, a FIFO or a device)");
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), SerializationError, "cannot open safetensors file '", path, "': ",
             std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  KILN_CHECK(!in.bad(), SerializationError, "reading safetensors file '", path, "' failed: ",
             std::strerror(errno));
  return decode_safetensors(bytes, path);
}

SafetensorsFile decode_safetensors(const std::string& bytes, const std::string& path) {
  auto file_size = static_cast<uint64_t>(bytes.size());
  auto fail = [&](uint64_t at, const std::string& rule) {
    KILN_FAIL(SerializationError, "safetensors file '", path, "', byte ", at, ": ", rule);
  };
  if (file_size < 8) fail(0, "the file has " + std::to_string(file_size) + " bytes, fewer than the 8 of the header length");
  uint64_t n = 0;
  for (size_t i = 8; i-- > 0;) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  if (n > kMaxHeaderBytes) fail(0, "the header length " + std::to_string(n) + " exceeds the 100 MiB limit");
  if (n > file_size - 8)
    fail(0, "the header length " + std::to_string(n) + " runs past the end of the file (" +
                std::to_string(file_size) + " bytes)");
  std::string text = bytes.substr(8, static_cast<size_t>(n));
  Json doc = JsonReader(path, text, 8).document();

  struct Entry {
    std::string name;
    DType dtype;
    bool from_i64;
    Shape shape;
    uint64_t begin, end;
    uint64_t at;
  };
  std::vector<Entry> entries;
  SafetensorsFile result;
  for (const auto& [name, v] : doc.members) {
    if (name == "__metadata__") {
      if (v.kind != Json::Kind::object) fail(v.at, "__metadata__ must be an object of strings");
      for (const auto& [k, s] : v.members) {
        if (s.kind != Json::Kind::string) fail(s.at, "__metadata__ value of '" + k + "' must be a string");
        result.metadata[k] = s.text;
      }
      continue;
    }
    if (name.empty()) fail(v.at, "a tensor has an empty name (kiln writes none: names must be non-empty)");
    if (v.kind != Json::Kind::object) fail(v.at, "tensor '" + name + "' must be described by an object");
    const Json *dtype = nullptr, *shape = nullptr, *offsets = nullptr;
    for (const auto& [k, f] : v.members) {
      if (k == "dtype") dtype = &f;
      else if (k == "shape") shape = &f;
      else if (k == "data_offsets") offsets = &f;
      else fail(f.at, "tensor '" + name + "' has an unknown field '" + k + "'");
    }
    if (!dtype || !shape || !offsets)
      fail(v.at, "tensor '" + name + "' needs dtype, shape and data_offsets");
    Entry e{name, DType::f32, false, {}, 0, 0, v.at};
    if (dtype->kind != Json::Kind::string) fail(dtype->at, "dtype of '" + name + "' must be a string");
    size_t element = 0;
    if (dtype->text == "F32") e.dtype = DType::f32, element = 4;
    else if (dtype->text == "F64") e.dtype = DType::f64, element = 8;
    else if (dtype->text == "I32") e.dtype = DType::i32, element = 4;
    else if (dtype->text == "U8") e.dtype = DType::u8, element = 1;
    else if (dtype->text == "BF16") e.dtype = DType::bf16, element = 2;
    else if (dtype->text == "I64") e.dtype = DType::i32, e.from_i64 = true, element = 8;
    else fail(dtype->at, "tensor '" + name + "' has dtype " + dtype->text + ", which kiln does not load (F32, F64, BF16, I32, I64, U8)");
    if (shape->kind != Json::Kind::array) fail(shape->at, "shape of '" + name + "' must be an array");
    // The sizes are bounded as kiln's Shape counts them, zeros as ones, so that [0, 2^40, 2^40]
    // (no elements, strides past int64) is refused here and not by the tensor made from it.
    uint64_t numel = 1, sizes = 1;
    for (const Json& d : shape->items) {
      if (d.kind != Json::Kind::integer) fail(d.at, "shape of '" + name + "' must hold whole numbers");
      const uint64_t counted = std::max<uint64_t>(d.number, 1);
      if (d.number > (uint64_t{1} << 40) || sizes > (uint64_t{1} << 50) / counted)
        fail(d.at, "shape of '" + name + "' is too large");
      sizes *= counted;
      numel *= d.number;
      e.shape.push_back(static_cast<int64_t>(d.number));
    }
    if (offsets->kind != Json::Kind::array || offsets->items.size() != 2 ||
        offsets->items[0].kind != Json::Kind::integer || offsets->items[1].kind != Json::Kind::integer)
      fail(offsets->at, "data_offsets of '" + name + "' must be [begin, end]");
    e.begin = offsets->items[0].number;
    e.end = offsets->items[1].number;
    if (e.end < e.begin) fail(offsets->at, "data_offsets of '" + name + "' end before they begin");
    if (e.end - e.begin != numel * element)
      fail(offsets->at, "tensor '" + name + "' of shape " + e.shape.str() + " and dtype " + dtype->text +
                            " needs " + std::to_string(numel * element) + " bytes, its data_offsets span " +
                            std::to_string(e.end - e.begin));
    entries.push_back(std::move(e));
  }

  // The data region must be covered exactly: tensors back to back from 0, no gaps, no overlap.
  uint64_t data_start = 8 + n, data_size = file_size - data_start;
  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t expected = 0;
  for (const Entry* e : by_offset) {
    if (e->begin != expected)
      fail(e->at, "tensor '" + e->name + "' starts at data offset " + std::to_string(e->begin) + ", expected " +
                      std::to_string(expected) + " (tensors must be stored back to back, without gaps or overlap)");
    expected = e->end;
  }
  if (expected != data_size)
    fail(data_start + std::min(expected, data_size),
         "the tensors describe " + std::to_string(expected) + " bytes of data but the file holds " +
             std::to_string(data_size) + (expected > data_size ? " (truncated)" : " (trailing bytes)"));

  for (const Entry* e : by_offset) {
    const char* data = bytes.data() + data_start + e->begin;
    auto size = static_cast<size_t>(e->end - e->begin);
    Tensor t = empty(e->shape, TensorOptions(e->dtype));
    if (e->from_i64) {
      std::vector<int32_t> values(size / 8);
      for (size_t i = 0; i < values.size(); ++i) {
        int64_t v = 0;
        std::memcpy(&v, data + 8 * i, 8);
        if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
          fail(data_start + e->begin + 8 * i, "I64 tensor '" + e->name + "' holds " + std::to_string(v) +
                                                  ", which does not fit kiln's i32");
        values[i] = static_cast<int32_t>(v);
      }
      t.backend().write(t.storage()->data(), 0, values.data(), values.size() * 4);
    } else if (size > 0) {
      t.backend().write(t.storage()->data(), 0, data, size);
    }
    result.tensors.emplace_back(e->name, t);
  }
  return result;
}

}  // namespace kiln
