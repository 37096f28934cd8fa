// The decoders behind load_digit_image (image.h): a picture file's size from its header, and its
// pixels, read from the file's bytes in memory.
//
// JPEG goes to libjpeg-turbo (Debian's libjpeg62-turbo), everything else to stb_image 2.27
// (Debian 12's libstb-dev). stb_image's JPEG decoder trusts the entropy-coded data: on a hostile
// file its int arithmetic overflows and its shifts run past 32 bits (undefined behaviour that
// fuzzing found, tests/fuzz/README.md), which stb 2.28 began to check and Debian 12 does not ship.
// libjpeg-turbo is the decoder most software uses, fuzzed continuously upstream, and it reports
// a corrupt or truncated file instead of decoding on. picture_check.h checks the container first
// either way.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace kiln::apps {

struct PictureSize {
  int width = 0;
  int height = 0;    // as stb_image 2.27 reads it: negative for a BMP whose rows run top first
  int channels = 0;  // 1 grey, 2 grey + alpha, 3 RGB, 4 RGBA
};

// Frees decoded pixels (both decoders allocate them with malloc).
struct PixelsFree {
  void operator()(uint8_t* pixels) const;
};

struct DecodedPicture {
  std::unique_ptr<uint8_t, PixelsFree> pixels;  // row-major, size.channels 8-bit samples a pixel
  PictureSize size;                             // height positive
};

// The size a picture file's header declares, decoding nothing. data::DataError naming `path`
// when it is no picture that kiln reads, with the decoder's reason.
PictureSize picture_size(std::span<const uint8_t> bytes, const std::string& path);

// The whole picture, 8 bits a sample. data::DataError naming `path` when the decoder wants bytes
// past the end of the file (truncated), finds the data corrupt, or fails (with its reason).
DecodedPicture decode_picture(std::span<const uint8_t> bytes, const std::string& path);

}  // namespace kiln::apps
