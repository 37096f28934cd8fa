#include "apps/mnist/image.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <system_error>
#include <vector>

#include "apps/mnist/picture_check.h"
#include "apps/mnist/picture_decode.h"

namespace kiln::apps {
namespace {

namespace fs = std::filesystem;

constexpr int kField = 28;        // MNIST's image side
constexpr int kBox = 20;          // the side the digit's bounding box is scaled to
constexpr double kCentre = 14.0;  // where the centre of mass goes (row and column index)
constexpr int kFrame = 2;         // width of the border read as background
// The strongest ink must differ from the background by this many of 255 grey levels: below it the
// picture is blank, and JPEG noise or paper texture would be blown up into a digit.
constexpr int kMinInkContrast = 32;
// 3 standard deviations of the background's noise, estimated robustly as 1.4826 MAD (the
// factor that turns a median absolute deviation into a Gaussian's sigma).
constexpr double kNoiseMads = 3.0 * 1.4826;
constexpr float kBoxThreshold = 0.25f;  // ink at or above this (of the strongest) spans the box

// How the grey levels of one picture map to ink in [0, 1].
struct InkLevels {
  std::array<float, 256> of{};  // of[g]: the ink of a pixel of grey level g
  int background = 0;           // median grey of the frame
  int contrast = 0;             // grey levels between the background and the strongest ink
};

// 0 is black, 255 white; transparency shows the white below it.
std::vector<uint8_t> to_grey(const uint8_t* pixels, int width, int height, int channels) {
  const size_t n = static_cast<size_t>(width) * static_cast<size_t>(height);
  const bool alpha = channels == 2 || channels == 4;
  std::vector<uint8_t> grey(n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = pixels + i * static_cast<size_t>(channels);
    float lum =
        channels >= 3 ? 0.299f * p[0] + 0.587f * p[1] + 0.114f * p[2] : static_cast<float>(p[0]);
    if (alpha) {
      const float a = p[channels - 1] / 255.0f;
      lum = lum * a + 255.0f * (1.0f - a);
    }
    grey[i] = static_cast<uint8_t>(std::lround(std::clamp(lum, 0.0f, 255.0f)));
  }
  return grey;
}

int histogram_median(const std::array<int64_t, 256>& hist, int64_t count) {
  int64_t seen = 0;
  for (int v = 0; v < 256; ++v) {
    seen += hist[static_cast<size_t>(v)];
    if (2 * seen >= count) return v;
  }
  return 255;
}

// Reads the background from the outermost kFrame pixels (the median, so a stroke that touches the
// border or a shadow in a corner does not move it), inverts light backgrounds, and sets the noise
// floor and the scale: the floor maps to 0, the strongest ink to 1.
InkLevels ink_levels(const uint8_t* grey, int width, int height) {
  std::array<int64_t, 256> frame{};
  int64_t frame_count = 0;
  const int left_end = std::min(kFrame, width), right_begin = std::max(left_end, width - kFrame);
  uint8_t darkest = 255, lightest = 0;
  for (int y = 0; y < height; ++y) {
    const uint8_t* row = grey + static_cast<size_t>(y) * static_cast<size_t>(width);
    const bool border_row = y < kFrame || y >= height - kFrame;
    for (int x = 0; x < width; ++x) {
      darkest = std::min(darkest, row[x]);
      lightest = std::max(lightest, row[x]);
      if (border_row || x < left_end || x >= right_begin) {
        ++frame[row[x]];
        ++frame_count;
      }
    }
  }
  InkLevels levels;
  levels.background = histogram_median(frame, frame_count);
  std::array<int64_t, 256> deviations{};
  for (int v = 0; v < 256; ++v)
    deviations[static_cast<size_t>(std::abs(v - levels.background))] +=
        frame[static_cast<size_t>(v)];
  const int mad = histogram_median(deviations, frame_count);

  // In ink units: 0 is the background's colour, 255 the opposite one.
  const bool light_background = levels.background > 127;
  auto ink = [&](int g) { return light_background ? 255 - g : g; };
  const int background = ink(levels.background);
  const int strongest = light_background ? ink(darkest) : ink(lightest);
  levels.contrast = strongest - background;
  // Capped halfway to the strongest ink, so a noisy frame cannot erase the digit itself.
  const double floor = std::min(background + kNoiseMads * mad, background + 0.5 * levels.contrast);
  const double scale = strongest > floor ? 1.0 / (strongest - floor) : 0.0;
  for (int g = 0; g < 256; ++g)
    levels.of[static_cast<size_t>(g)] =
        static_cast<float>(std::clamp((ink(g) - floor) * scale, 0.0, 1.0));
  return levels;
}

// One source pixel's share in one target pixel along an axis.
struct Tap {
  int source;
  float weight;
};
using Taps = std::vector<std::vector<Tap>>;  // [target index] -> its taps

// The ink's box along one axis, [box_begin, box_end), and the part of the picture that is read,
// [crop_begin, crop_end): the box and one pixel around it, which holds the anti-aliased edge of
// strokes (ink fainter than kBoxThreshold) and nothing else.
struct Extent {
  int box_begin, box_end, crop_begin, crop_end;
};

Extent extent(int box_begin, int box_end, int size) {
  return {box_begin, box_end, std::max(0, box_begin - 1), std::min(size, box_end + 1)};
}

// Resampling weights along one axis. Source coordinate x lands at target coordinate
// origin + (x - box_begin) * scale (pixel i covers [i, i + 1) on both sides); source pixels outside
// the crop count as background. Shrinking (scale < 1) averages the source over each target pixel's
// footprint (a box filter: no aliasing); enlarging interpolates linearly between the two source
// pixel centres around each target pixel centre.
Taps axis_taps(int targets, int origin, const Extent& e, double scale) {
  Taps taps(static_cast<size_t>(targets));
  for (int t = 0; t < targets; ++t) {
    std::vector<Tap>& out = taps[static_cast<size_t>(t)];
    if (scale < 1.0) {
      const double a = e.box_begin + (t - origin) / scale, b = a + 1.0 / scale;
      const int first = std::max(e.crop_begin, static_cast<int>(std::floor(a)));
      const int last = std::min(e.crop_end, static_cast<int>(std::ceil(b)));
      for (int i = first; i < last; ++i) {
        const double overlap = std::min(b, i + 1.0) - std::max(a, double(i));
        if (overlap > 0) out.push_back({i, static_cast<float>(overlap * scale)});
      }
    } else {
      const double x = e.box_begin + (t + 0.5 - origin) / scale - 0.5;
      const int i = static_cast<int>(std::floor(x));
      const double f = x - i;
      if (i >= e.crop_begin && i < e.crop_end && f < 1.0)
        out.push_back({i, static_cast<float>(1.0 - f)});
      if (i + 1 >= e.crop_begin && i + 1 < e.crop_end && f > 0.0)
        out.push_back({i + 1, static_cast<float>(f)});
    }
  }
  return taps;
}

// A field of cols x rows target pixels: out[v][u] = sum over taps of wy * wx * ink(grey[y][x]), in
// two separable passes so each source pixel is read once however large the picture.
std::vector<float> resample(const uint8_t* grey, int width, const InkLevels& levels,
                            const Taps& cols, const Taps& rows, const Extent& y_extent) {
  const size_t nu = cols.size(), nv = rows.size();
  const int row_begin = y_extent.crop_begin, row_end = y_extent.crop_end;
  std::vector<float> across(static_cast<size_t>(row_end - row_begin) * nu);  // [source row, u]
  for (int y = row_begin; y < row_end; ++y) {
    const uint8_t* row = grey + static_cast<size_t>(y) * static_cast<size_t>(width);
    float* dst = &across[static_cast<size_t>(y - row_begin) * nu];
    for (size_t u = 0; u < nu; ++u) {
      float sum = 0.0f;
      for (const Tap& tap : cols[u]) sum += tap.weight * levels.of[row[tap.source]];
      dst[u] = sum;
    }
  }
  std::vector<float> out(nv * nu, 0.0f);
  for (size_t v = 0; v < nv; ++v)
    for (const Tap& tap : rows[v]) {
      const float* src = &across[static_cast<size_t>(tap.source - row_begin) * nu];
      for (size_t u = 0; u < nu; ++u) out[v * nu + u] += tap.weight * src[u];
    }
  for (float& value : out) value = std::clamp(value, 0.0f, 1.0f);  // rounding can step past 1
  return out;
}

// Steps 4 to 6 of the header, given the ink levels of a picture that has some.
std::vector<float> mnist_digit(const uint8_t* grey, int width, int height,
                               const InkLevels& levels) {
  // 4. The box: every pixel with at least kBoxThreshold ink.
  int x0 = width, x1 = -1, y0 = height, y1 = -1;
  for (int y = 0; y < height; ++y) {
    const uint8_t* row = grey + static_cast<size_t>(y) * static_cast<size_t>(width);
    for (int x = 0; x < width; ++x)
      if (levels.of[row[x]] >= kBoxThreshold) {
        x0 = std::min(x0, x), x1 = std::max(x1, x);
        y0 = std::min(y0, y), y1 = std::max(y1, y);
      }
  }
  const Extent ex = extent(x0, x1 + 1, width), ey = extent(y0, y1 + 1, height);
  const double scale = double(kBox) / std::max(x1 + 1 - x0, y1 + 1 - y0);

  // 5. Render the crop alone, scaled, to find its centre of mass. The margin holds the crop's
  // pixel around the box and bilinear's spread of one more source pixel. Whole-pixel origins keep
  // a box that is already 20 pixels (scale 1) as it was: MNIST's own digits pass through unchanged
  // (tests/apps/test_image.cpp measures it on the test set).
  const int margin = 2 + static_cast<int>(std::ceil(2 * scale));
  const int nu = static_cast<int>(std::ceil((x1 + 1 - x0) * scale)) + 2 * margin;
  const int nv = static_cast<int>(std::ceil((y1 + 1 - y0) * scale)) + 2 * margin;
  const std::vector<float> crop = resample(grey, width, levels, axis_taps(nu, margin, ex, scale),
                                           axis_taps(nv, margin, ey, scale), ey);
  double mass = 0.0, mu = 0.0, mv = 0.0;
  for (int v = 0; v < nv; ++v)
    for (int u = 0; u < nu; ++u) {
      const double value = crop[static_cast<size_t>(v * nu + u)];
      mass += value, mu += u * value, mv += v * value;
    }

  // 6. The same rendering shifted by whole pixels so the centre of mass lands nearest (14, 14).
  const int origin_x = margin + static_cast<int>(std::lround(kCentre - mu / mass));
  const int origin_y = margin + static_cast<int>(std::lround(kCentre - mv / mass));
  return resample(grey, width, levels, axis_taps(kField, origin_x, ex, scale),
                  axis_taps(kField, origin_y, ey, scale), ey);
}

std::string no_ink(const InkLevels& levels) {
  return detail::concat("holds no ink: its strongest pixel is ", levels.contrast,
                        " grey levels from the background (", levels.background,
                        "), and a digit needs at least ", kMinInkContrast,
                        " (is the picture blank?)");
}

Tensor field_tensor(const std::vector<float>& values) {
  return from_vector(values, Shape{kField, kField});
}

struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};

// The whole of the picture file at `path` (a regular file of 1 to kMaxPictureBytes bytes).
std::vector<uint8_t> read_picture(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  KILN_CHECK(fs::exists(status), data::DataError, path, ": cannot open: no such file");
  KILN_CHECK(fs::is_regular_file(status), data::DataError, path,
             ": cannot open: not a regular file (a directory, a FIFO or a device)");
  const std::uintmax_t size = fs::file_size(path, ec);
  KILN_CHECK(!ec, data::DataError, path, ": cannot read its size: ", ec.message());
  KILN_CHECK(size > 0, data::DataError, path, ": an empty file (0 bytes), not a picture");
  KILN_CHECK(size <= kMaxPictureBytes, data::DataError, path, ": ", size, " bytes; a digit's picture may have at most ",
             kMaxPictureBytes, " (more than any picture within the pixel limits needs)");
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  KILN_CHECK(file != nullptr, data::DataError, path, ": cannot open for reading: ", std::strerror(errno));
  std::vector<uint8_t> bytes(size);
  const size_t got = std::fread(bytes.data(), 1, bytes.size(), file.get());
  KILN_CHECK(!std::ferror(file.get()), data::DataError, path, ": read error: ", std::strerror(errno));
  KILN_CHECK(got == size, data::DataError, path, ": changed while being read (", size, " bytes, then ", got, ")");
  return bytes;
}

}  // namespace

Tensor to_mnist_digit(const uint8_t* grey, int width, int height) {
  KILN_CHECK(grey != nullptr, ValueError, "to_mnist_digit: grey is null");
  KILN_CHECK(width >= 1 && height >= 1 && width <= kMaxImageSide && height <= kMaxImageSide,
             ValueError, "to_mnist_digit: a ", width, "x", height,
             " image; each side must be 1 to ", kMaxImageSide);
  InkLevels levels = ink_levels(grey, width, height);
  KILN_CHECK(levels.contrast >= kMinInkContrast, ValueError, "to_mnist_digit: the image ",
             no_ink(levels));
  return field_tensor(mnist_digit(grey, width, height, levels));
}

Tensor load_digit_image(const std::string& path) {
  const std::vector<uint8_t> bytes = read_picture(path);
  if (std::optional<PictureFlaw> flaw = picture_flaw(bytes)) {
    KILN_CHECK(!flaw->truncated, data::DataError, path, ": truncated: its ", bytes.size(),
               " bytes end before the picture does (", flaw->what, ")");
    KILN_FAIL(data::DataError, path, ": not a picture kiln reads: ", flaw->what);
  }
  // The header first, so a huge (or corrupt) size is refused before anything is allocated.
  // stb_image 2.27 gives a top-down BMP's height as its header has it, negative (and decodes it
  // as its size, whose absolute value it takes only then)
  const PictureSize size = picture_size(bytes, path);
  const int64_t wide = size.width, high = size.height < 0 ? -int64_t{size.height} : size.height,
                pixels = wide * high;
  KILN_CHECK(wide <= kMaxImageSide && high <= kMaxImageSide && pixels <= kMaxImagePixels,
             data::DataError, path, ": ", wide, "x", high,
             " pixels in its header; a digit's picture may have at most ", kMaxImageSide,
             " on a side and ", kMaxImagePixels, " pixels in all (scale it down)");
  if (std::optional<PictureFlaw> flaw = picture_too_short(bytes, size.width, static_cast<int>(high)))
    KILN_FAIL(data::DataError, path, ": truncated: its ", bytes.size(), " bytes end before the picture does (",
              flaw->what, ")");

  DecodedPicture decoded = decode_picture(bytes, path);
  const int width = decoded.size.width, height = decoded.size.height;
  std::vector<uint8_t> grey = to_grey(decoded.pixels.get(), width, height, decoded.size.channels);
  decoded.pixels.reset();
  InkLevels levels = ink_levels(grey.data(), width, height);
  KILN_CHECK(levels.contrast >= kMinInkContrast, data::DataError, path, ": the image ", no_ink(levels));
  return field_tensor(mnist_digit(grey.data(), width, height, levels));
}

}  // namespace kiln::apps
