// What stb_image 2.27 (Debian 12's) trusts in a picture file and should not, checked before it
// decodes the file, so that a hostile picture is refused instead of corrupting memory, hanging or
// allocating gigabytes. Each rule answers an input that fuzzing found (tests/fuzz/README.md):
//
//   PNG   every chunk lies within the file (stb allocates what an IDAT chunk claims, 1.4 GB for a
//         96-byte file, before it finds the end)
//   JPEG  every segment lies within the file, and every Huffman table holds at most 256 codes, as
//         the standard says (stb wrote past its 257-entry table of code sizes otherwise); the
//         segments are found as stb read them (fill bytes before a marker, any bytes skipped
//         between segments). Every table a scan decodes with is defined before it, every
//         component is in a scan before the end of the image, and a progressive scan that refines
//         a component follows its first DC scan, as the standard says (stb read its tables and
//         coefficients from uninitialised memory otherwise)
//   PNM   width, height and maximum value are at most 65535 (stb's header reader overflows int)
//   JPEG, PNM, BMP, TGA   the file is at least as long as the claimed size needs
//         (picture_too_short: stb decodes zeros past the end, for as long as the header says)
//
// JPEG is now decoded by libjpeg-turbo (picture_decode.h), which checks a file as it reads it; the
// JPEG checks stay as the standard's rules, said in kiln's words before anything is decoded. The
// formats that stb can decode but kiln does not compile in (Radiance HDR, whose decoder hangs on
// a truncated run; Photoshop PSD; Softimage PIC) are named, so the error says what the file is.
// The checks read the container only (chunks, segments, header numbers), never pixels.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace kiln::apps {

// The formats load_digit_image reads, as a user would name them.
inline constexpr const char* kPictureFormats = "PNG, JPEG, BMP, GIF, TGA or PNM (P5/P6)";

struct PictureFlaw {
  std::string what;        // "its PNG chunk 'IDAT' at byte 33 claims 1400000000 bytes", ...
  bool truncated = false;  // a part runs past the end of the file (a cut file reads the same)
};

// Whether the file is a JPEG (its start-of-image marker, after any fill bytes).
bool is_jpeg(std::span<const uint8_t> bytes);

// The first flaw of a picture file's bytes, or nothing. A format the checks do not know is left
// to stb_image (which then reads it, or says it cannot).
std::optional<PictureFlaw> picture_flaw(std::span<const uint8_t> bytes);

// Whether the file is shorter than the least that a width x height picture of its format can
// take (JPEG, PNM, BMP, TGA, whose decoders in stb_image read zeros past the end of the file and
// go on decoding the size its header claims: a 43-byte TGA of 13868 x 2048 pixels took 11 s under
// the sanitizers). A lower bound: a complete picture always passes. A truncated flaw, or nothing.
std::optional<PictureFlaw> picture_too_short(std::span<const uint8_t> bytes, int width, int height);

}  // namespace kiln::apps
