// mnist-predict's pictures: a picture of a handwritten digit (a photo, a scan, a drawing) made
// into an MNIST-like input by the steps that made MNIST itself (LeCun et al. 1998;
// yann.lecun.com/exdb/mnist):
//
//   1. grey: luminance 0.299 R + 0.587 G + 0.114 B, transparent pixels composited onto white;
//   2. polarity: ink is what differs from the background, read as the median of the outermost
//      2-pixel frame; a light background (median > 127) means dark ink, and the image is inverted;
//   3. noise: the background level plus 3 robust deviations of the frame (median + 4.45 MAD) is
//      subtracted and the rest stretched so the strongest ink is 1, so paper texture and JPEG
//      ringing do not become ink;
//   4. box: the bounding box of the pixels at >= 25% of that ink is cut out, with one pixel
//      around it for the fainter anti-aliased edge of the strokes;
//   5. size: the box is scaled, aspect kept, so its longer side is 20 pixels: an area average when
//      shrinking, bilinear when enlarging, so edges come out anti-aliased like MNIST's;
//   6. place: the result goes into a 28x28 field with the centre of mass of its intensities at
//      pixel (14, 14) (row and column index), by a whole-pixel shift; what falls off is cut.
//
// The output is white ink on black, f32 [28, 28] in [0, 1] on the CPU: what a model trained on
// MNIST (scaled to [0, 1]) expects; normalise it as that model's training data was.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/core/tensor.h"
#include "kiln/datasets/idx.h"

namespace kiln::apps {

// Pictures larger than this on either side, or with more pixels than kMaxImagePixels, are
// refused from their header, before anything is decoded: no digit needs them. 32 Mi pixels take a
// 24-megapixel photo (6000 x 4000) and keep the decoder's buffers under about half a GiB in the
// worst case (a 16-bit RGBA PNG: 256 MiB of samples and the 128 MiB of 8-bit ones made from them);
// a 16000 x 16000 picture would need gigabytes.
inline constexpr int kMaxImageSide = 16384;
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 25;

// A picture file larger than this is refused before it is read: a picture within the pixel
// limits needs less (2^25 pixels of 16-bit RGBA, uncompressed, are 256 MiB).
inline constexpr uint64_t kMaxPictureBytes = uint64_t{512} << 20;

// Reads a PNG, JPEG, BMP, GIF (first frame), TGA or binary PNM (P5/P6) file, any size within
// kMaxImageSide, kMaxImagePixels and kMaxPictureBytes, any channel count, 8 or 16 bits, and
// preprocesses it as above. stb_image decodes it, once picture_check.h has found its container
// sound (stb's Radiance HDR, Photoshop and Softimage PIC decoders are not compiled in).
// data::DataError naming the file when it is empty, cannot be read or decoded (with the decoder's
// reason), is malformed (picture_check.h), is truncated (a part or the decoder wanted bytes past
// its end), is too large, or holds no ink (a blank or nearly uniform picture).
Tensor load_digit_image(const std::string& path);

// The preprocessing alone, on a grey image (row-major, width * height bytes, 0 black, 255 white,
// either polarity). ValueError when the sizes are outside 1..kMaxImageSide or the image has no ink.
Tensor to_mnist_digit(const uint8_t* grey, int width, int height);

}  // namespace kiln::apps
