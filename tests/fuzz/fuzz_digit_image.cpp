// Fuzzes mnist-predict's picture loader (apps/mnist/image.h, load_digit_image): stb_image's
// decoders and kiln's preprocessing behind them.
//
// Feeds each input as a picture file (PNG, JPEG, BMP, GIF, PNM, ...: stb_image tells them by their
// first bytes). Expects a finite [28, 28] f32 tensor in [0, 1] or one of kiln's errors (DataError:
// not an image, too large, no ink). Any other exception, a crash, a sanitizer report, a hang or
// memory past scripts/fuzz's bound is a finding.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "apps/mnist/image.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kiln::fuzz::InputFile file;
  kiln::Tensor digit;
  try {
    digit = kiln::apps::load_digit_image(file.write(data, size));
  } catch (const kiln::Error&) {
    return 0;
  }
  bool ok = digit.shape() == kiln::Shape{28, 28} && digit.dtype() == kiln::DType::f32;
  if (ok)
    for (float v : digit.to_vector<float>()) ok = ok && std::isfinite(v) && v >= 0.0f && v <= 1.0f;
  if (!ok) {
    std::fprintf(stderr, "fuzz_digit_image: the digit is not a finite [28, 28] f32 tensor in [0, 1]\n");
    std::abort();
  }
  return 0;
}
