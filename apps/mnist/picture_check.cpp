// The container checks of picture_check.h: PNG chunks, JPEG segments, tables and scans, PNM
// header numbers, and the signatures of the formats kiln leaves out.
#include "apps/mnist/picture_check.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string_view>
#include <vector>

#include "kiln/core/error.h"

namespace kiln::apps {

namespace {

using Bytes = std::span<const uint8_t>;
using detail::concat;

bool starts_with(Bytes bytes, std::string_view prefix) {
  return bytes.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), bytes.begin(),
                                                      [](char c, uint8_t b) { return static_cast<uint8_t>(c) == b; });
}

uint32_t big_endian(Bytes bytes, size_t at, size_t size) {
  uint32_t v = 0;
  for (size_t i = 0; i < size; ++i) v = v << 8 | bytes[at + i];
  return v;
}
uint32_t little_endian(Bytes bytes, size_t at, size_t size) {
  uint32_t v = 0;
  for (size_t i = size; i-- > 0;) v = v << 8 | bytes[at + i];
  return v;
}

std::string hex(uint32_t v, int digits) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%0*X", digits, v);
  return text;
}

// A PNG chunk's type as text: its four letters, or its bytes in hex where they are not letters.
std::string chunk_name(Bytes bytes, size_t at) {
  std::string name;
  for (size_t i = at; i < at + 4; ++i)
    if (!std::isalpha(bytes[i])) return hex(big_endian(bytes, at, 4), 8);
    else name += static_cast<char>(bytes[i]);
  return "'" + name + "'";
}

// A part that claims more bytes than the `remaining` ones from its start.
PictureFlaw past_end(const std::string& part, size_t at, uint64_t claimed, size_t remaining) {
  return {concat("its ", part, " at byte ", at, " claims ", claimed, " bytes, and ", remaining, " remain from there"),
          true};
}

// A JPEG starts with its start-of-image marker after any number of fill bytes, as stb_image read
// it (libjpeg-turbo wants none, and says so): where the marker ends, or 0 for a file that is not a
// JPEG.
size_t jpeg_start(Bytes bytes) {
  const size_t fill = static_cast<size_t>(std::find_if(bytes.begin(), bytes.end(), [](uint8_t b) { return b != 0xFF; }) -
                                          bytes.begin());
  return fill > 0 && fill < bytes.size() && bytes[fill] == 0xD8 ? fill + 1 : 0;
}

// PNG: 8 signature bytes, then chunks of a 4-byte length, a 4-byte type, the data and a CRC.
std::optional<PictureFlaw> png_flaw(Bytes bytes) {
  for (size_t at = 8; at + 8 <= bytes.size();) {
    const uint32_t length = big_endian(bytes, at, 4);
    const std::string name = "PNG chunk " + chunk_name(bytes, at + 4);
    if (length > 0x7FFFFFFFu)
      return PictureFlaw{concat("its ", name, " at byte ", at, " claims ", length, " bytes, past PNG's 2^31 - 1")};
    if (uint64_t{length} + 12 > bytes.size() - at) return past_end(name, at, uint64_t{length} + 12, bytes.size() - at);
    if (starts_with(bytes.subspan(at + 4), "IEND")) break;
    at += size_t{length} + 12;
  }
  return std::nullopt;
}

// What a JPEG has defined when the walk reaches a scan, as stb_image keeps it: the tables that its
// DQT and DHT segments set (four of each kind, by id) and its frame's components. stb_image 2.27
// decodes with whatever it holds, so a table that no segment set, or a component that no scan
// coded, is uninitialised memory to it (the pixels come out of whatever the heap held before).
struct JpegState {
  struct Component {
    uint8_t id = 0, quant = 0;
    bool coded = false;  // a scan has set its coefficients (baseline: any scan; progressive: DC first)
  };
  bool quant[4] = {}, dc[4] = {}, ac[4] = {};
  bool framed = false, progressive = false;
  std::vector<Component> components;
  bool refused = false;  // stb_image refuses the file at this segment: the walk stops there
};

// A DQT segment's tables: a precision/id byte, then 64 steps of 8 or 16 bits, up to the segment's
// end exactly (or stb_image refuses the file).
void quant_tables(Bytes bytes, size_t begin, size_t end, JpegState& jpeg) {
  for (size_t at = begin; at < end;) {
    const unsigned precision = bytes[at] >> 4, id = bytes[at] & 15u, size = precision ? 129 : 65;
    jpeg.refused = precision > 1 || id > 3 || size > end - at;
    if (jpeg.refused) return;
    jpeg.quant[id] = true;
    at += size;
  }
}

// A DHT segment's tables: a class/id byte, 16 counts of codes by length, then the symbols.
std::optional<PictureFlaw> huffman_tables(Bytes bytes, size_t begin, size_t end, JpegState& jpeg) {
  for (size_t at = begin; at < end;) {
    if (end - at < 17) return PictureFlaw{concat("its JPEG Huffman table at byte ", at, " is cut short by its segment")};
    unsigned codes = 0;
    for (size_t i = 1; i <= 16; ++i) codes += bytes[at + i];
    if (codes > 256)
      return PictureFlaw{concat("its JPEG Huffman table (DHT) at byte ", at, " declares ", codes,
                                " codes; a table holds at most 256")};
    if (codes > end - at - 17)
      return PictureFlaw{concat("its JPEG Huffman table at byte ", at, " is cut short by its segment")};
    const unsigned table_class = bytes[at] >> 4, id = bytes[at] & 15u;
    jpeg.refused = table_class > 1 || id > 3;
    if (jpeg.refused) return std::nullopt;
    (table_class == 0 ? jpeg.dc : jpeg.ac)[id] = true;
    at += 17 + codes;
  }
  return std::nullopt;
}

// A frame header (SOF0-2): precision, height, width, then an id, sampling and quantization table
// per component. stb_image refuses a second frame, and a length that is not its components'.
void frame(Bytes bytes, size_t begin, size_t end, bool progressive, JpegState& jpeg) {
  jpeg.refused = jpeg.framed || end - begin < 6 || end - begin != 6 + 3 * size_t{bytes[begin + 5]};
  if (jpeg.refused) return;
  jpeg.framed = true;
  jpeg.progressive = progressive;
  for (size_t i = 0; i < bytes[begin + 5]; ++i)
    jpeg.components.push_back({bytes[begin + 6 + 3 * i], bytes[begin + 8 + 3 * i]});
}

// A scan header (SOS at `marker_at`): its components, each with its DC and AC Huffman tables,
// then the band of coefficients (Ss to Se) and the bit positions (Ah, Al). Each table the scan
// decodes with, and each component's quantization table, must be defined by then (the standard's
// rule too), and a progressive scan that adds to a component's coefficients must follow the DC
// scan that first set them. stb_image refuses a scan before the frame, and a header that does
// not match it.
std::optional<PictureFlaw> scan(Bytes bytes, size_t marker_at, size_t begin, size_t end, JpegState& jpeg) {
  const size_t count = end > begin ? bytes[begin] : 0;
  jpeg.refused = !jpeg.framed || count < 1 || count > 4 || count > jpeg.components.size() ||
                 end - begin != 4 + 2 * count;
  if (jpeg.refused) return std::nullopt;
  const unsigned first = bytes[begin + 1 + 2 * count], high = bytes[begin + 3 + 2 * count] >> 4;
  const bool dc_first = first == 0 && high == 0;
  const std::string where = concat("its JPEG scan at byte ", marker_at);
  for (size_t i = 0; i < count; ++i) {
    const uint8_t id = bytes[begin + 1 + 2 * i], tables = bytes[begin + 2 + 2 * i];
    const auto c = std::find_if(jpeg.components.begin(), jpeg.components.end(),
                                [&](const JpegState::Component& k) { return k.id == id; });
    jpeg.refused = c == jpeg.components.end() || c->quant > 3 || tables >> 4 > 3 || (tables & 15) > 3;
    if (jpeg.refused) return std::nullopt;
    auto undefined = [&](const char* table, unsigned t, const char* segment) {
      return PictureFlaw{concat(where, " uses ", table, " table ", t, " for component ", int{id}, ", and no ", segment,
                                " segment before it defines that table")};
    };
    if (!jpeg.quant[c->quant]) return undefined("quantization", c->quant, "DQT");
    if ((!jpeg.progressive || dc_first) && !jpeg.dc[tables >> 4]) return undefined("DC Huffman", tables >> 4, "DHT");
    if ((!jpeg.progressive || first > 0) && !jpeg.ac[tables & 15]) return undefined("AC Huffman", tables & 15, "DHT");
    if (jpeg.progressive && !dc_first && !c->coded)
      return PictureFlaw{concat(where, " refines component ", int{id},
                                " before a scan gave its DC terms (a progressive JPEG codes a component's DC"
                                " terms in its first scan of it)")};
    c->coded = c->coded || !jpeg.progressive || dc_first;
  }
  return std::nullopt;
}

// JPEG: markers (0xFF, any number of fill 0xFFs, a code), most followed by a 2-byte length that
// counts itself; after a start of scan (SOS), entropy-coded data, in which 0xFF is followed by 0
// (a data byte) or by a marker. The walk goes as stb_image 2.27 read a file (kiln's JPEG decoder
// before libjpeg-turbo), so that it saw every segment stb would: stb skips any bytes between
// segments up to the next 0xFF (a segment shorter than its data is no error to it), and stops at a
// marker it does not know, as the walk does. Where stb refused a frame or a scan header, the walk
// stops too, leaving the file to the decoder, which refuses it.
std::optional<PictureFlaw> jpeg_flaw(Bytes bytes, size_t after_soi) {
  const size_t n = bytes.size();
  JpegState jpeg;
  bool in_scan = false;  // in entropy-coded data
  for (size_t at = after_soi; at < n;) {
    while (at < n && bytes[at] != 0xFF) ++at;
    const size_t marker_at = at;
    while (at < n && bytes[at] == 0xFF) ++at;  // fill bytes
    if (at == n) return std::nullopt;
    const uint8_t code = bytes[at++];
    if (code == 0x00) {
      if (in_scan) continue;  // a data byte 0xFF
      return std::nullopt;    // stb_image refuses the file: "unknown marker"
    }
    if (code >= 0xD0 && code <= 0xD7) continue;  // a restart marker: the scan goes on after it
    if (code == 0xD9) {                          // end of image: every component coded
      for (const JpegState::Component& c : jpeg.components)
        if (!c.coded)
          return PictureFlaw{concat("its JPEG image ends (at byte ", marker_at, ") before any scan codes component ",
                                    int{c.id}, ": the file holds no pixels for it")};
      return std::nullopt;
    }
    if (code == 0x01 || code == 0xD8) return std::nullopt;  // not a segment stb_image takes: it stops
    const std::string name = "JPEG segment " + hex(0xFF00u | code, 4);
    // counted from the marker (its fill bytes and code, then the length, which counts itself)
    const size_t head = at - marker_at;
    if (n - at < 2) return past_end(name, marker_at, head + 2, n - marker_at);
    const uint32_t length = big_endian(bytes, at, 2);
    if (length < 2) return PictureFlaw{concat("its ", name, " at byte ", marker_at, " has a length of ", length)};
    if (length > n - at) return past_end(name, marker_at, head + length, n - marker_at);
    const size_t begin = at + 2, end = at + length;
    std::optional<PictureFlaw> flaw;
    if (code == 0xDB) quant_tables(bytes, begin, end, jpeg);
    if (code == 0xC4) flaw = huffman_tables(bytes, begin, end, jpeg);
    if (code >= 0xC0 && code <= 0xC2) frame(bytes, begin, end, code == 0xC2, jpeg);
    if (code == 0xDA) flaw = scan(bytes, marker_at, begin, end, jpeg);
    if (flaw || jpeg.refused) return flaw;
    at = end;
    in_scan = code == 0xDA;
  }
  return std::nullopt;
}

// Binary PNM (P5 grey, P6 colour): the header's width, height and maximum value, in decimal,
// between whitespace and '#' comments.
std::optional<PictureFlaw> pnm_flaw(Bytes bytes) {
  size_t at = 2;
  for (const char* field : {"width", "height", "maximum value"}) {
    while (at < bytes.size() && (std::isspace(bytes[at]) || bytes[at] == '#'))
      if (bytes[at] == '#')
        while (at < bytes.size() && bytes[at] != '\n' && bytes[at] != '\r') ++at;
      else ++at;
    uint32_t value = 0;
    for (; at < bytes.size() && std::isdigit(bytes[at]); ++at) {
      value = value * 10 + (bytes[at] - '0');
      if (value > 65535) return PictureFlaw{concat("its PNM header's ", field, " is more than 65535")};
    }
  }
  return std::nullopt;
}

}  // namespace

bool is_jpeg(std::span<const uint8_t> bytes) { return jpeg_start(bytes) > 0; }

std::optional<PictureFlaw> picture_flaw(std::span<const uint8_t> bytes) {
  auto left_out = [](const char* format) {
    return PictureFlaw{concat("a ", format, " picture (kiln reads ", kPictureFormats, ")")};
  };
  if (starts_with(bytes, "\x89PNG\r\n\x1a\n")) return png_flaw(bytes);
  if (const size_t after = jpeg_start(bytes)) return jpeg_flaw(bytes, after);
  if (starts_with(bytes, "P5") || starts_with(bytes, "P6")) return pnm_flaw(bytes);
  if (starts_with(bytes, "#?RADIANCE\n") || starts_with(bytes, "#?RGBE\n")) return left_out("Radiance HDR");
  if (starts_with(bytes, "8BPS")) return left_out("Photoshop (PSD)");
  if (starts_with(bytes, "\x53\x80\xF6\x34") && bytes.size() >= 92 && starts_with(bytes.subspan(88), "PICT"))
    return left_out("Softimage PIC");
  return std::nullopt;
}

std::optional<PictureFlaw> picture_too_short(std::span<const uint8_t> bytes, int width, int height) {
  const uint64_t w = static_cast<uint64_t>(width), h = static_cast<uint64_t>(height), pixels = w * h;
  const char* format = nullptr;
  uint64_t least = 0;
  if (starts_with(bytes, "\x89PNG\r\n\x1a\n") || starts_with(bytes, "GIF8")) {
    return std::nullopt;  // their decoders stop where the data does
  } else if (jpeg_start(bytes) > 0) {
    // every 8 x 8 block of the component with the most of them (ceil(w/8) x ceil(h/8)) starts with
    // a Huffman code of its DC term, one bit at the least, in baseline and progressive files alike
    format = "JPEG", least = ((w + 7) / 8 * ((h + 7) / 8) + 7) / 8;
  } else if (starts_with(bytes, "P5") || starts_with(bytes, "P6")) {
    format = "PNM", least = pixels * (bytes[1] == '6' ? 3 : 1);  // a byte a sample at the least
  } else if (starts_with(bytes, "BM") && bytes.size() >= 18) {
    // rows of width * bits / 8 bytes: stb_image refuses run-length encoding (compression 1 and 2)
    // and reads any other compression value as uncompressed rows
    const bool core = little_endian(bytes, 14, 4) == 12;  // OS/2's header: 16-bit sizes, bits at 24
    if (bytes.size() < (core ? 26u : 34u)) return std::nullopt;  // stb_image finds the header short
    const uint64_t bits = little_endian(bytes, core ? 24 : 28, 2);
    const uint32_t compression = core ? 0 : little_endian(bytes, 30, 4);
    if (compression == 1 || compression == 2) return std::nullopt;
    format = "BMP", least = h * ((w * bits + 7) / 8);
  } else if (bytes.size() >= 18 && (bytes[2] & ~8) >= 1 && (bytes[2] & ~8) <= 3) {
    // TGA (the format stb_image tries last, with no signature): types 1-3 raw, 9-11 run-length
    // encoded, whose packets cover at most 128 pixels with a header byte and at least a pixel
    const uint64_t per_pixel = std::max<uint64_t>(1, (bytes[16] + 7u) / 8);
    format = "TGA", least = 18 + (bytes[2] & 8 ? (pixels + 127) / 128 * (1 + per_pixel) : pixels * per_pixel);
  } else {
    return std::nullopt;
  }
  if (bytes.size() >= least) return std::nullopt;
  return PictureFlaw{concat("a ", width, "x", height, " ", format, " picture takes at least ", least, " bytes"), true};
}

}  // namespace kiln::apps
