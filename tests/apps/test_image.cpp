// Digit pictures to MNIST inputs: synthetic digits drawn here at several sizes, written in every
// channel layout, both polarities and several file formats, must all come out as MNIST digits
// (20-pixel box, centre of mass at (14, 14)) and as the same digit; broken files are refused by
// name; real MNIST digits pass through unchanged.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "apps/mnist/image.h"
#include "apps/mnist/picture_decode.h"
#include "kiln/datasets/mnist.h"
#include "tests/datasets/idx_writer.h"
#include "tests/skip.h"

#include "apps/mnist/stb.h"
// after <cstdio>, which jpeglib.h needs before it
#include <jpeglib.h>

using namespace kiln;
using namespace kiln::apps;
using namespace kiln::data;
using kiln::test::TempDir;

namespace {

// ---- drawing: a digit as ink coverage in [0, 1], row-major ----

struct Picture {
  int width = 0, height = 0;
  std::vector<float> ink;  // coverage of each pixel, 4x4 supersampled
};

double segment_distance(double x, double y, double ax, double ay, double bx, double by) {
  const double dx = bx - ax, dy = by - ay;
  const double t = std::clamp(((x - ax) * dx + (y - ay) * dy) / (dx * dx + dy * dy), 0.0, 1.0);
  return std::hypot(x - ax - t * dx, y - ay - t * dy);
}

// Shapes in a unit square, (0, 0) top left: true where (x, y) is ink.
using Shape2D = std::function<bool(double, double)>;
const Shape2D kOne = [](double x, double y) {
  return segment_distance(x, y, 0.3, 0.22, 0.55, 0.05) < 0.07 ||
         segment_distance(x, y, 0.55, 0.05, 0.55, 0.95) < 0.07;
};
const Shape2D kSeven = [](double x, double y) {
  return segment_distance(x, y, 0.15, 0.08, 0.85, 0.08) < 0.06 ||
         segment_distance(x, y, 0.85, 0.08, 0.4, 0.95) < 0.06;
};
const Shape2D kDisc = [](double x, double y) { return std::hypot(x - 0.5, y - 0.5) < 0.4; };
const Shape2D kRing = [](double x, double y) {
  const double r = std::hypot(x - 0.5, y - 0.5);
  return r < 0.42 && r > 0.28;
};

// The shape drawn in a square of 0.7 * the shorter side, off centre (towards the top left), so
// that centring has work to do.
Picture draw(const Shape2D& shape, int width, int height) {
  Picture p{width, height,
            std::vector<float>(static_cast<size_t>(width) * static_cast<size_t>(height))};
  const double side = 0.7 * std::min(width, height), left = 0.1 * width, top = 0.08 * height;
  constexpr int kSub = 4;
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      int hits = 0;
      for (int sy = 0; sy < kSub; ++sy)
        for (int sx = 0; sx < kSub; ++sx)
          hits +=
              shape((x + (sx + 0.5) / kSub - left) / side, (y + (sy + 0.5) / kSub - top) / side);
      p.ink[static_cast<size_t>(y * width + x)] = static_cast<float>(hits) / (kSub * kSub);
    }
  return p;
}

// ---- encoding: channel layouts and polarities ----

enum class Layout { grey, grey_alpha, rgb, rgba };
enum class Polarity { dark_on_light, light_on_dark };

const char* name_of(Layout l) {
  switch (l) {
    case Layout::grey: return "grey";
    case Layout::grey_alpha: return "grey+alpha";
    case Layout::rgb: return "rgb";
    case Layout::rgba: return "rgba";
  }
  return "?";
}

int channels_of(Layout l) {
  switch (l) {
    case Layout::grey: return 1;
    case Layout::grey_alpha: return 2;
    case Layout::rgb: return 3;
    case Layout::rgba: return 4;
  }
  return 0;
}

uint8_t mix(double paper, double ink, float coverage) {
  return static_cast<uint8_t>(std::lround(paper + (ink - paper) * coverage));
}

// Paper grain: uniform noise in [-12, 12] grey levels, the same sequence on every run.
class Grain {
 public:
  explicit Grain(uint32_t seed) : state_(seed) {}
  double operator()() {
    state_ = state_ * 1664525u + 1013904223u;
    return static_cast<double>(state_ >> 8) / double(1u << 24) * 24.0 - 12.0;
  }

 private:
  uint32_t state_;
};

// grey: black on white or white on black. rgb: dark blue ink on cream paper, or cream on blue.
// With alpha the ink is opaque black and the background fully transparent (its colour black too,
// so a reader that ignored alpha would see a black square): only dark on light makes sense.
std::vector<uint8_t> encode(const Picture& p, Layout layout, Polarity polarity) {
  const int c = channels_of(layout);
  const bool dark_ink = polarity == Polarity::dark_on_light;
  const double paper_rgb[3] = {250, 245, 230}, ink_rgb[3] = {20, 30, 90};
  std::vector<uint8_t> out(p.ink.size() * static_cast<size_t>(c));
  for (size_t i = 0; i < p.ink.size(); ++i) {
    uint8_t* px = &out[i * static_cast<size_t>(c)];
    const float cover = p.ink[i];
    switch (layout) {
      case Layout::grey: px[0] = dark_ink ? mix(255, 0, cover) : mix(0, 255, cover); break;
      case Layout::grey_alpha: px[0] = 0, px[1] = mix(0, 255, cover); break;
      case Layout::rgb:
        for (int k = 0; k < 3; ++k)
          px[k] = dark_ink ? mix(paper_rgb[k], ink_rgb[k], cover)
                           : mix(ink_rgb[k], paper_rgb[k], cover);
        break;
      case Layout::rgba: px[0] = px[1] = px[2] = 0, px[3] = mix(0, 255, cover); break;
    }
  }
  return out;
}

enum class Format { png, jpeg, bmp, tga };

const char* extension_of(Format f) {
  switch (f) {
    case Format::png: return ".png";
    case Format::jpeg: return ".jpg";
    case Format::bmp: return ".bmp";
    case Format::tga: return ".tga";
  }
  return "";
}

std::string write_image(const TempDir& dir, const std::string& stem, Format format, int width,
                        int height, int channels, const std::vector<uint8_t>& pixels) {
  const std::string path = (dir.path() / (stem + extension_of(format))).string();
  int ok = 0;
  switch (format) {
    case Format::png:
      ok = stbi_write_png(path.c_str(), width, height, channels, pixels.data(), 0);
      break;
    case Format::jpeg:
      ok = stbi_write_jpg(path.c_str(), width, height, channels, pixels.data(), 95);
      break;
    case Format::bmp:
      ok = stbi_write_bmp(path.c_str(), width, height, channels, pixels.data());
      break;
    case Format::tga:
      ok = stbi_write_tga(path.c_str(), width, height, channels, pixels.data());
      break;
  }
  REQUIRE_MESSAGE(ok, "cannot write ", path);
  return path;
}

// A JPEG as libjpeg writes it (as cameras and editors do, and stb_image_write cannot): progressive,
// or CMYK with Adobe's marker (libjpeg writes it for CMYK; the samples stored inverted, 255 no ink).
std::string write_libjpeg(const TempDir& dir, const std::string& stem, int width, int height, J_COLOR_SPACE space,
                          int components, const std::vector<uint8_t>& pixels, bool progressive) {
  jpeg_compress_struct info{};
  jpeg_error_mgr errors{};
  info.err = jpeg_std_error(&errors);  // an error exits: these inputs are valid
  jpeg_create_compress(&info);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&info, &out, &size);
  info.image_width = static_cast<JDIMENSION>(width);
  info.image_height = static_cast<JDIMENSION>(height);
  info.input_components = components;
  info.in_color_space = space;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, 95, TRUE);
  if (progressive) jpeg_simple_progression(&info);
  jpeg_start_compress(&info, TRUE);
  while (info.next_scanline < info.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(&pixels[size_t{info.next_scanline} * static_cast<size_t>(width * components)]);
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  jpeg_destroy_compress(&info);
  const std::vector<uint8_t> bytes(out, out + size);
  std::free(out);
  return dir.write(stem + ".jpg", bytes).string();
}

// ---- what an MNIST digit looks like ----

struct DigitStats {
  double min = 1, max = 0;
  int box_width = 0, box_height = 0;  // of the pixels at >= 0.25
  double com_x = 0, com_y = 0;        // centre of mass, (column, row) index
  double outside_max = 0;             // strongest pixel more than two pixels away from that box
};

DigitStats stats_of(const std::vector<float>& v) {
  DigitStats s;
  int x0 = 28, x1 = -1, y0 = 28, y1 = -1;
  double mass = 0;
  for (int y = 0; y < 28; ++y)
    for (int x = 0; x < 28; ++x) {
      const double value = v[static_cast<size_t>(y * 28 + x)];
      s.min = std::min(s.min, value), s.max = std::max(s.max, value);
      mass += value, s.com_x += x * value, s.com_y += y * value;
      if (value >= 0.25)
        x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  s.com_x /= mass, s.com_y /= mass;
  s.box_width = x1 - x0 + 1, s.box_height = y1 - y0 + 1;
  for (int y = 0; y < 28; ++y)
    for (int x = 0; x < 28; ++x)
      if (x < x0 - 2 || x > x1 + 2 || y < y0 - 2 || y > y1 + 2)
        s.outside_max = std::max(s.outside_max, double(v[static_cast<size_t>(y * 28 + x)]));
  return s;
}

void check_mnist_like(const Tensor& digit) {
  REQUIRE(digit.shape() == Shape{28, 28});
  REQUIRE(digit.dtype() == DType::f32);
  const DigitStats s = stats_of(digit.to_vector<float>());
  CHECK(s.min >= 0.0);
  CHECK(s.max <= 1.0);
  CHECK(s.max >= 0.8);  // the strongest ink is stretched to 1; resampling may dim it a little
  CHECK(s.outside_max < 0.05);  // the background is black
  CHECK(std::max(s.box_width, s.box_height) >= 19);
  CHECK(std::max(s.box_width, s.box_height) <= 21);
  CHECK(std::abs(s.com_x - 14.0) <= 0.75);
  CHECK(std::abs(s.com_y - 14.0) <= 0.75);
}

struct Difference {
  double mean = 0, max = 0;
};

// How far apart two fields are, after the whole-pixel shift (at most one pixel each way) that
// brings them closest: centring rounds the centre of mass to a whole pixel, and a symmetric
// shape's centre sits on a half pixel, where the smallest change tips the rounding.
Difference difference(const Tensor& a, const Tensor& b) {
  const std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
  Difference best{1e9, 1e9};
  for (int dy = -1; dy <= 1; ++dy)
    for (int dx = -1; dx <= 1; ++dx) {
      Difference d;
      for (int y = 0; y < 28; ++y)
        for (int x = 0; x < 28; ++x) {
          const int sx = x + dx, sy = y + dy;
          const double vs = sx >= 0 && sx < 28 && sy >= 0 && sy < 28
                                ? va[static_cast<size_t>(sy * 28 + sx)]
                                : 0.0;
          const double e = std::abs(vs - vb[static_cast<size_t>(y * 28 + x)]);
          d.mean += e / 784.0, d.max = std::max(d.max, e);
        }
      if (d.mean < best.mean) best = d;
    }
  return best;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& word) {
  return text.find(word) != std::string::npos;
}

struct Size {
  int width, height;
};
const Size kSizes[] = {{28, 28}, {100, 60}, {60, 100}, {400, 400}, {16, 16}};

struct NamedShape {
  std::string name;
  const Shape2D* shape;
};
const NamedShape kShapes[] = {{"1", &kOne}, {"7", &kSeven}, {"disc", &kDisc}, {"ring", &kRing}};

// The MNIST test images, u8 [10000, 28, 28], or nothing, having marked the running case skipped
// (failed under CI=true, where scripts/setup fetches the files).
std::optional<Tensor> mnist_test_images() {
  const char* env = std::getenv("KILN_DATA");
  const std::filesystem::path dir = env && *env ? env : KILN_MNIST_DIR;
  try {
    find_mnist(dir, Split::test);
  } catch (const DataError&) {
    test::skip("no MNIST in " + dir.string() + " (run scripts/setup, or set KILN_DATA=DIR)", test::InCi::fail);
    return std::nullopt;
  }
  return load_mnist(dir, Split::test).images;
}

Tensor mnist_field(const uint8_t* grey) {
  std::vector<float> values(784);
  for (size_t i = 0; i < values.size(); ++i) values[i] = grey[i] / 255.0f;
  return from_vector(values, Shape{28, 28});
}

}  // namespace

TEST_CASE("image: a digit in every layout, polarity and format comes out as one MNIST digit") {
  TempDir dir;
  struct Variant {
    Layout layout;
    Polarity polarity;
    Format format;
  };
  const Variant variants[] = {
      {Layout::grey, Polarity::light_on_dark, Format::png},
      {Layout::grey_alpha, Polarity::dark_on_light, Format::png},
      {Layout::rgb, Polarity::dark_on_light, Format::png},
      {Layout::rgb, Polarity::light_on_dark, Format::png},
      {Layout::rgba, Polarity::dark_on_light, Format::png},
      {Layout::grey, Polarity::dark_on_light, Format::bmp},
      {Layout::rgb, Polarity::light_on_dark, Format::tga},
      {Layout::grey, Polarity::dark_on_light, Format::jpeg},
      {Layout::grey, Polarity::light_on_dark, Format::jpeg},
      {Layout::rgb, Polarity::dark_on_light, Format::jpeg},
  };
  for (const Size& size : kSizes)
    for (const NamedShape& shape : kShapes) {
      const Picture picture = draw(*shape.shape, size.width, size.height);
      const std::string stem =
          shape.name + "_" + std::to_string(size.width) + "x" + std::to_string(size.height);
      CAPTURE(stem);
      // The reference: black on white grey PNG, lossless.
      const Tensor reference =
          load_digit_image(write_image(dir, stem, Format::png, size.width, size.height, 1,
                                       encode(picture, Layout::grey, Polarity::dark_on_light)));
      check_mnist_like(reference);

      for (const Variant& v : variants) {
        const std::string name = stem + "_" + name_of(v.layout) +
                                 (v.polarity == Polarity::dark_on_light ? "_dark" : "_light");
        CAPTURE(name);
        const std::string extension = extension_of(v.format);
        CAPTURE(extension);
        const Tensor digit = load_digit_image(write_image(dir, name, v.format, size.width,
                                                          size.height, channels_of(v.layout),
                                                          encode(picture, v.layout, v.polarity)));
        check_mnist_like(digit);
        const Difference d = difference(digit, reference);
        if (v.format == Format::jpeg) {
          // JPEG noise can tip a faint edge pixel across the box threshold, which moves the box
          // by one source pixel: 1/17 of its size in a 28-pixel picture.
          CHECK(d.mean < 0.08);
        } else {
          CHECK(d.max < 0.02);  // lossless: only grey-level rounding differs
        }
      }

      // Polarity alone, through the same lossy format: black on white against white on black.
      auto jpeg = [&](Polarity polarity) {
        const std::string name =
            stem + (polarity == Polarity::dark_on_light ? "_pair_dark" : "_pair_light");
        return load_digit_image(write_image(dir, name, Format::jpeg, size.width, size.height, 1,
                                            encode(picture, Layout::grey, polarity)));
      };
      CHECK(difference(jpeg(Polarity::dark_on_light), jpeg(Polarity::light_on_dark)).mean < 0.02);
    }
}

TEST_CASE("image: the same digit at other sizes and aspect ratios gives nearly the same field") {
  // Pictures where the digit is at least 40 pixels: smaller ones lose detail before enlarging.
  const Size sizes[] = {{100, 60}, {60, 100}, {250, 180}};
  for (const NamedShape& shape : kShapes) {
    CAPTURE(shape.name);
    auto digit_at = [&](Size size) {
      const Picture p = draw(*shape.shape, size.width, size.height);
      return to_mnist_digit(encode(p, Layout::grey, Polarity::dark_on_light).data(), size.width,
                            size.height);
    };
    const Tensor large = digit_at({400, 400});
    for (const Size& size : sizes) {
      CAPTURE(size.width);
      CAPTURE(size.height);
      CHECK(difference(digit_at(size), large).mean < 0.04);
    }
  }
}

TEST_CASE("image: a photo-like picture: tinted, textured paper, uneven ink, JPEG") {
  TempDir dir;
  const int width = 300, height = 240;
  const Picture picture = draw(kSeven, width, height);
  std::vector<uint8_t> rgb(static_cast<size_t>(width * height * 3));
  Grain grain(12345);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      const size_t i = static_cast<size_t>(y * width + x);
      const double g = grain(), ink_strength = 0.75 + 0.25 * x / width;  // a pen running dry
      const double paper[3] = {215 + g, 205 + g, 180 + g}, ink[3] = {40, 40, 60};
      for (int k = 0; k < 3; ++k)
        rgb[i * 3 + static_cast<size_t>(k)] =
            mix(paper[k], ink[k], static_cast<float>(picture.ink[i] * ink_strength));
    }
  const Tensor digit =
      load_digit_image(write_image(dir, "photo", Format::jpeg, width, height, 3, rgb));
  check_mnist_like(digit);
  const Tensor clean =
      to_mnist_digit(encode(picture, Layout::grey, Polarity::dark_on_light).data(), width, height);
  CHECK(difference(digit, clean).mean < 0.05);
}

TEST_CASE("image: to_mnist_digit and load_digit_image agree") {
  TempDir dir;
  const Picture picture = draw(kRing, 100, 60);
  const std::vector<uint8_t> grey = encode(picture, Layout::grey, Polarity::dark_on_light);
  const std::string path = write_image(dir, "ring", Format::png, 100, 60, 1, grey);
  CHECK(difference(load_digit_image(path), to_mnist_digit(grey.data(), 100, 60)).max == 0.0);
  // The ring's hole stays empty.
  const std::vector<float> v = to_mnist_digit(grey.data(), 100, 60).to_vector<float>();
  CHECK(v[14 * 28 + 14] < 0.05);
}

TEST_CASE("image: blank pictures are refused, naming the file") {
  TempDir dir;
  const int width = 64, height = 48;
  std::vector<uint8_t> white(static_cast<size_t>(width * height), 255), black(white.size(), 0);
  std::vector<uint8_t> grainy(white.size());
  for (size_t i = 0; i < grainy.size(); ++i)
    grainy[i] = static_cast<uint8_t>(240 + (i * 7919) % 13);
  const std::vector<std::string> paths = {
      write_image(dir, "white", Format::png, width, height, 1, white),
      write_image(dir, "black", Format::png, width, height, 1, black),
      write_image(dir, "grainy", Format::jpeg, width, height, 1, grainy),
  };
  for (const std::string& path : paths) {
    CAPTURE(path);
    const std::string message = error_of([&] { load_digit_image(path); });
    CHECK_MESSAGE(contains(message, path), message);
    CHECK_MESSAGE(contains(message, "no ink"), message);
    CHECK_THROWS_AS(load_digit_image(path), DataError);
  }
  CHECK_THROWS_AS(to_mnist_digit(white.data(), width, height), ValueError);
  CHECK_MESSAGE(contains(error_of([&] { to_mnist_digit(white.data(), width, height); }), "no ink"),
                "blank grey buffer");
}

TEST_CASE("image: unreadable files are refused with the file's name and the reason") {
  TempDir dir;
  const std::string missing = (dir.path() / "missing.png").string();
  std::string message = error_of([&] { load_digit_image(missing); });
  CHECK_MESSAGE(contains(message, missing), message);
  CHECK_MESSAGE(contains(message, "no such file"), message);

  message = error_of([&] { load_digit_image(dir.path().string()); });
  CHECK_MESSAGE(contains(message, "not a regular file"), message);

  const std::string text = "not an image";
  const std::string garbage = dir.write("garbage.png", {text.begin(), text.end()}).string();
  message = error_of([&] { load_digit_image(garbage); });
  CHECK_MESSAGE(contains(message, garbage), message);
  CHECK_MESSAGE(contains(message, "not a picture kiln reads (PNG, JPEG, BMP, GIF, TGA or PNM (P5/P6))"), message);
  CHECK_THROWS_AS(load_digit_image(garbage), DataError);

  // A real PNG cut short: the header reads, the pixels are not all there.
  const Picture picture = draw(kOne, 64, 64);
  const std::string whole = write_image(dir, "whole", Format::png, 64, 64, 1,
                                        encode(picture, Layout::grey, Polarity::dark_on_light));
  const std::uintmax_t bytes = std::filesystem::file_size(whole);
  std::filesystem::copy_file(whole, dir.path() / "cut.png");
  std::filesystem::resize_file(dir.path() / "cut.png", bytes / 2);
  const std::string cut = (dir.path() / "cut.png").string();
  message = error_of([&] { load_digit_image(cut); });
  CHECK_MESSAGE(contains(message, cut), message);
  CHECK_MESSAGE(contains(message, "truncated"), message);
  CHECK_THROWS_AS(load_digit_image(cut), DataError);
}

TEST_CASE("image: sizes beyond kMaxImageSide are refused") {
  TempDir dir;
  std::vector<uint8_t> row(static_cast<size_t>(kMaxImageSide + 1), 255);
  row[100] = 0;
  const std::string wide = write_image(dir, "wide", Format::png, kMaxImageSide + 1, 1, 1, row);
  const std::string message = error_of([&] { load_digit_image(wide); });
  CHECK_MESSAGE(contains(message, wide), message);
  CHECK_MESSAGE(contains(message, "16385x1 pixels"), message);

  CHECK_THROWS_AS(to_mnist_digit(row.data(), kMaxImageSide + 1, 1), ValueError);
  CHECK_THROWS_AS(to_mnist_digit(row.data(), 0, 1), ValueError);
  CHECK_THROWS_AS(to_mnist_digit(nullptr, 28, 28), ValueError);
  // The largest allowed width is fine: a one-pixel-high line with a dot in it.
  CHECK(to_mnist_digit(row.data(), kMaxImageSide, 1).shape() == Shape{28, 28});
}

TEST_CASE("image: real MNIST digits pass through to_mnist_digit unchanged (if present)" *
          doctest::test_suite("needs-mnist")) {
  // MNIST was made by this very preprocessing (20-pixel box, centre of mass at (14, 14)).
  const std::optional<Tensor> images = mnist_test_images();
  if (!images) return;  // skipped
  const std::vector<uint8_t> pixels = images->to_vector<uint8_t>();
  const int64_t n = images->size(0);
  double total = 0;
  int64_t close = 0;
  for (int64_t k = 0; k < n; ++k) {
    const uint8_t* grey = pixels.data() + k * 784;
    const std::vector<float> out = to_mnist_digit(grey, 28, 28).to_vector<float>();
    double diff = 0;
    for (size_t i = 0; i < out.size(); ++i) diff += std::abs(out[i] - grey[i] / 255.0) / 784.0;
    total += diff;
    close += diff < 0.05;
  }
  MESSAGE("MNIST test set through to_mnist_digit: mean abs diff ", total / double(n), ", ", close,
          " of ", n, " images under 0.05");
  CHECK(total / double(n) < 0.002);
  // The rest hold a stray speck fainter than a quarter of the ink that MNIST's box took in.
  CHECK(close >= n * 995 / 1000);
}

TEST_CASE("image: MNIST digits enlarged 10x, dark on grainy paper, JPEG, come back (if present)" *
          doctest::test_suite("needs-mnist")) {
  const std::optional<Tensor> images = mnist_test_images();
  if (!images) return;  // skipped
  const std::vector<uint8_t> pixels = images->to_vector<uint8_t>();
  TempDir dir;
  constexpr int kScale = 10, kSide = 28 * kScale, kDigits = 50;
  Grain grain(2024);
  double total = 0;
  for (int k = 0; k < kDigits; ++k) {
    CAPTURE(k);
    const uint8_t* grey = pixels.data() + k * 784;
    auto at = [&](int x, int y) {
      return x < 0 || y < 0 || x > 27 || y > 27 ? 0.0 : grey[y * 28 + x] / 255.0;
    };
    std::vector<uint8_t> page(static_cast<size_t>(kSide * kSide));
    for (int y = 0; y < kSide; ++y)
      for (int x = 0; x < kSide; ++x) {
        // Bilinear upsampling of the digit, dark grey ink on grainy light paper.
        const double sx = (x + 0.5) / kScale - 0.5, sy = (y + 0.5) / kScale - 0.5;
        const int ix = static_cast<int>(std::floor(sx)), iy = static_cast<int>(std::floor(sy));
        const double fx = sx - ix, fy = sy - iy;
        const double ink = (1 - fx) * (1 - fy) * at(ix, iy) + fx * (1 - fy) * at(ix + 1, iy) +
                           (1 - fx) * fy * at(ix, iy + 1) + fx * fy * at(ix + 1, iy + 1);
        page[static_cast<size_t>(y * kSide + x)] = mix(215 + grain(), 40, static_cast<float>(ink));
      }
    const Tensor digit = load_digit_image(
        write_image(dir, "digit" + std::to_string(k), Format::jpeg, kSide, kSide, 1, page));
    check_mnist_like(digit);
    const double diff = difference(digit, mnist_field(grey)).mean;
    CHECK(diff < 0.06);
    total += diff;
  }
  MESSAGE("MNIST digits enlarged 10x, inverted, grainy, JPEG: mean abs diff ", total / kDigits,
          " (after the best whole-pixel shift)");
  CHECK(total / kDigits < 0.035);
}

// ---- hostile files: huge headers, truncated and garbled pictures ----

namespace {

using kiln::test::Bytes;
using kiln::test::concat;

Bytes read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void put_le(Bytes& bytes, size_t at, uint32_t value, size_t size) {
  for (size_t i = 0; i < size; ++i) bytes[at + i] = static_cast<uint8_t>(value >> (8 * i));
}
void put_be(Bytes& bytes, size_t at, uint32_t value, size_t size) {
  for (size_t i = 0; i < size; ++i) bytes[at + i] = static_cast<uint8_t>(value >> (8 * (size - 1 - i)));
}
Bytes text_bytes(const std::string& text) { return {text.begin(), text.end()}; }

// Where `marker` first occurs in `bytes` (a PNG chunk type, a JPEG marker).
size_t find(const Bytes& bytes, const Bytes& marker) {
  const auto at = std::search(bytes.begin(), bytes.end(), marker.begin(), marker.end());
  REQUIRE(at != bytes.end());
  return static_cast<size_t>(at - bytes.begin());
}

// The CRC-32 that ends each PNG chunk (over its type and data), bit by bit.
uint32_t crc32_of(const uint8_t* data, size_t size) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) {
    crc ^= data[i];
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

// A small picture of a "1", dark on light, written by stb_image_write (and by hand for PNM).
std::string small_picture(const TempDir& dir, const std::string& stem, Format format) {
  return write_image(dir, stem, format, 64, 64, 1,
                     encode(draw(kOne, 64, 64), Layout::grey, Polarity::dark_on_light));
}
std::string small_pnm(const TempDir& dir, const std::string& stem) {
  return dir.write(stem + ".pgm", concat(text_bytes("P5\n64 64\n255\n"),
                                         encode(draw(kOne, 64, 64), Layout::grey, Polarity::dark_on_light)))
      .string();
}

// Headers that declare a picture of width x height, over no pixels or a few: each format's own
// header, or a real small picture's with its size fields changed.
std::vector<std::pair<std::string, Bytes>> huge_headers(const TempDir& dir, uint32_t width, uint32_t height) {
  Bytes png = read_file(small_picture(dir, "small", Format::png));
  put_be(png, 16, width, 4);  // IHDR data: width, height, ... after the 8-byte signature and the chunk's
  put_be(png, 20, height, 4); // length and type
  put_be(png, 29, crc32_of(&png[12], 17), 4);
  Bytes jpeg = read_file(small_picture(dir, "small", Format::jpeg));
  const size_t sof = find(jpeg, {0xFF, 0xC0});  // baseline frame: length, precision, height, width
  put_be(jpeg, sof + 5, height, 2);
  put_be(jpeg, sof + 7, width, 2);
  Bytes bmp = read_file(small_picture(dir, "small", Format::bmp));
  put_le(bmp, 18, width, 4);
  put_le(bmp, 22, height, 4);
  Bytes top_down = bmp;  // rows stored top first: the header's height is negative
  put_le(top_down, 22, 0u - height, 4);
  Bytes tga = read_file(small_picture(dir, "small", Format::tga));
  put_le(tga, 12, width, 2);
  put_le(tga, 14, height, 2);
  Bytes gif = concat(text_bytes("GIF89a"), Bytes(7, 0));
  put_le(gif, 6, width, 2);
  put_le(gif, 8, height, 2);
  const std::string size = std::to_string(width) + " " + std::to_string(height);
  return {{"huge.png", png},
          {"huge.jpg", jpeg},
          {"huge.bmp", bmp},
          {"huge-top-down.bmp", top_down},
          {"huge.tga", tga},
          {"huge.gif", gif},
          {"huge.pgm", text_bytes("P5\n" + size + "\n255\n")}};
}

}  // namespace

TEST_CASE("image: headers that declare a huge picture are refused before it is decoded") {
  TempDir dir;
  for (const auto& [name, bytes] : huge_headers(dir, 16000, 16000)) {
    const std::string path = dir.write(name, bytes).string();
    const std::string message = error_of([&] { load_digit_image(path); });
    CAPTURE(message);
    CHECK(contains(message, path));
    CHECK(contains(message, "16000x16000 pixels"));
    CHECK(contains(message, std::to_string(kMaxImagePixels) + " pixels in all"));
  }
}

TEST_CASE("image: a header that claims more pixels than its file can hold is refused as truncated, before decoding") {
  TempDir dir;
  std::vector<std::pair<std::string, Bytes>> cases;
  for (auto& [name, bytes] : huge_headers(dir, 4000, 3000))  // 12 million pixels: within the limits
    if (!name.ends_with(".png") && !name.ends_with(".gif")) cases.emplace_back(name, bytes);
  // a raw grey TGA (stb_image_write's are run-length encoded), and the 43 bytes that fuzzing found
  // decoding as a 13868 x 2048 run-length TGA of zeros (tests/fuzz/README.md)
  Bytes raw_tga(18 + 64, 0x80);
  std::fill(raw_tga.begin(), raw_tga.begin() + 18, 0);
  raw_tga[2] = 3, raw_tga[16] = 8;
  put_le(raw_tga, 12, 4000, 2);
  put_le(raw_tga, 14, 3000, 2);
  cases.emplace_back("raw.tga", raw_tga);
  // a compression field that is neither 0 nor 3: stb_image still reads the rows as uncompressed
  Bytes odd_bmp = std::find_if(cases.begin(), cases.end(), [](const auto& c) { return c.first == "huge.bmp"; })->second;
  put_le(odd_bmp, 30, 0xFFFFFB00u, 4);
  cases.emplace_back("odd-compression.bmp", odd_bmp);
  cases.emplace_back("fuzzed.tga",
                     read_file(std::string(KILN_FUZZ_PICTURES) + "/found-tga-rle-43-bytes-claim-28m-pixels.tga"));
  const std::map<std::string, std::string> claims = {
      {"huge.jpg", "a 4000x3000 JPEG picture takes at least 23438 bytes"},
      {"huge.bmp", "a 4000x3000 BMP picture takes at least"},
      {"huge-top-down.bmp", "a 4000x3000 BMP picture takes at least"},
      {"odd-compression.bmp", "a 4000x3000 BMP picture takes at least"},
      {"huge.tga", "a 4000x3000 TGA picture takes at least"},
      {"huge.pgm", "a 4000x3000 PNM picture takes at least 12000000 bytes"},
      {"raw.tga", "a 4000x3000 TGA picture takes at least 12000018 bytes"},
      {"fuzzed.tga", "a 13868x2048 TGA picture takes at least 1109458 bytes"}};
  REQUIRE(cases.size() == claims.size());
  for (const auto& [name, bytes] : cases) {
    const std::string path = dir.write(name, bytes).string();
    const std::string message = error_of([&] { load_digit_image(path); });
    CHECK_MESSAGE(contains(message, path + ": truncated: its " + std::to_string(bytes.size()) +
                                        " bytes end before the picture does (" + claims.at(name)),
                  message);
  }
}

TEST_CASE("image: complete pictures of any size, however well they compress, are not taken for truncated ones") {
  TempDir dir;
  std::vector<std::string> paths;
  const std::pair<int, int> sizes[] = {{1, 1}, {2, 3}, {17, 5}, {9, 40}, {300, 200}};
  for (const auto& [w, h] : sizes) {
    const std::string stem = "p" + std::to_string(w) + "x" + std::to_string(h);
    for (const Layout layout : {Layout::grey, Layout::rgb, Layout::rgba})
      for (const Format format : {Format::jpeg, Format::bmp, Format::tga})
        paths.push_back(write_image(dir, stem + name_of(layout), format, w, h, channels_of(layout),
                                    encode(draw(kOne, w, h), layout, Polarity::dark_on_light)));
    const Bytes grey = encode(draw(kOne, w, h), Layout::grey, Polarity::dark_on_light);
    const std::string size = std::to_string(w) + " " + std::to_string(h);
    paths.push_back(dir.write(stem + ".pgm", concat(text_bytes("P5\n" + size + "\n255\n"), grey)).string());
    Bytes rgb;
    for (uint8_t v : grey) rgb.insert(rgb.end(), 3, v);
    paths.push_back(dir.write(stem + ".ppm", concat(text_bytes("P6\n" + size + "\n255\n"), rgb)).string());
  }
  // one colour all over, the best case of each format's compression (no ink: refused for that)
  const std::vector<uint8_t> blank(2000 * 1500, 255);
  for (const Format format : {Format::jpeg, Format::tga})
    paths.push_back(write_image(dir, "blank", format, 2000, 1500, 1, blank));
  for (const std::string& path : paths) {
    std::string message;
    try {
      load_digit_image(path);
    } catch (const DataError& e) {
      message = e.what();
    }
    CHECK_MESSAGE(!contains(message, "truncated"), path, ": ", message);
  }
}

TEST_CASE("image: truncated pictures are refused as truncated, whatever the format") {
  TempDir dir;
  const std::vector<std::string> pictures = {
      small_picture(dir, "digit", Format::png), small_picture(dir, "digit", Format::jpeg),
      small_picture(dir, "digit", Format::bmp), small_picture(dir, "digit", Format::tga), small_pnm(dir, "digit")};
  for (const std::string& whole : pictures) {
    CAPTURE(whole);
    CHECK(load_digit_image(whole).shape() == Shape{28, 28});
    const std::filesystem::path cut = std::filesystem::path(whole).replace_filename(
        "cut-" + std::filesystem::path(whole).filename().string());
    const Bytes bytes = read_file(whole);
    dir.write(cut.filename().string(), Bytes(bytes.begin(), bytes.begin() + std::ssize(bytes) / 2));
    const std::string message = error_of([&] { load_digit_image(cut.string()); });
    CHECK_MESSAGE(contains(message, cut.string()), message);
    CHECK_MESSAGE(contains(message, "truncated"), message);
    CHECK_MESSAGE(contains(message, std::to_string(bytes.size() / 2) + " bytes"), message);
  }
}

TEST_CASE("image: containers that stb_image 2.27 would trust are checked first, and refused naming the flaw") {
  TempDir dir;
  struct Hostile {
    std::string name;
    Bytes bytes;
    std::string expected;  // in the message, after the path
  };
  std::vector<Hostile> cases;
  // a pixel chunk that claims 1.4 GB (stb allocated it before finding the end of the file)
  Bytes png = read_file(small_picture(dir, "digit", Format::png));
  const size_t idat = find(png, text_bytes("IDAT")) - 4;
  put_be(png, idat, 1400000000, 4);
  cases.push_back({"idat.png", png, ": truncated: its " + std::to_string(png.size()) +
                                        " bytes end before the picture does (its PNG chunk 'IDAT' at byte " +
                                        std::to_string(idat) + " claims 1400000012 bytes"});
  // a Huffman table of 2 + 4 + ... codes past 256 (stb wrote past its table of code sizes)
  Bytes jpeg = read_file(small_picture(dir, "digit", Format::jpeg));
  const size_t dht = find(jpeg, {0xFF, 0xC4});
  jpeg[dht + 5] = 200;  // the marker, its length, the table's class and id, then 16 counts
  jpeg[dht + 6] = 100;
  cases.push_back({"dht.jpg", jpeg, ": not a picture kiln reads: its JPEG Huffman table (DHT) at byte " +
                                        std::to_string(dht + 4) + " declares "});
  // a segment longer than what is left of the file
  Bytes cut = read_file(small_picture(dir, "digit", Format::jpeg));
  put_be(cut, dht + 2, 0xFFF0, 2);
  cases.push_back({"long-segment.jpg", cut, "truncated: its " + std::to_string(cut.size()) +
                                                " bytes end before the picture does (its JPEG segment 0xFFC4 at byte " +
                                                std::to_string(dht) + " claims 65522 bytes, and " +
                                                std::to_string(cut.size() - dht) + " remain from there"});
  // tables and components that stb_image would take from uninitialised memory: stb_image_write's
  // JPEG has a DQT of tables 0 and 1, a frame of components 1, 2, 3 (tables 0, 1, 1), a DHT of
  // tables DC 0, AC 0, DC 1, AC 1, and one scan of the three (tables 0/0, 1/1, 1/1)
  const Bytes good = read_file(small_picture(dir, "digit", Format::jpeg));
  const size_t sof = find(good, {0xFF, 0xC0}), sos = find(good, {0xFF, 0xDA});
  const std::string scan = "its JPEG scan at byte " + std::to_string(sos);
  jpeg = good;
  jpeg[sof + 18] = 3;  // the marker, its length, precision, height, width, count; component 3's table
  cases.push_back({"quantization.jpg", jpeg, ": not a picture kiln reads: " + scan +
                   " uses quantization table 3 for component 3, and no DQT segment before it defines that table"});
  jpeg = good;
  jpeg[sos + 8] = 0x21;  // the marker, its length, the count, component 1 and its tables, 2, its tables
  cases.push_back({"dc-huffman.jpg", jpeg, scan + " uses DC Huffman table 2 for component 2, and no DHT"});
  jpeg[sos + 8] = 0x13;
  cases.push_back({"ac-huffman.jpg", jpeg, scan + " uses AC Huffman table 3 for component 2, and no DHT"});
  jpeg = good;
  jpeg[sos + 9] = 2;  // the scan's third component: 2 again, so 3 is in no scan
  cases.push_back({"no-scan.jpg", jpeg, ": not a picture kiln reads: its JPEG image ends (at byte " +
                   std::to_string(good.size() - 2) + ") before any scan codes component 3"});
  jpeg = good;
  jpeg[sof + 1] = 0xC2;  // progressive, and the scan a first pass over the AC band 1..63
  jpeg[sos + 11] = 1;
  cases.push_back({"progressive.jpg", jpeg, scan + " refines component 1 before a scan gave its DC terms"});
  // header numbers past int (stb's reader overflowed)
  cases.push_back({"width.pgm", text_bytes("P5\n# a comment\n00000555555555555 8\n255\n"),
                   ": not a picture kiln reads: its PNM header's width is more than 65535"});
  cases.push_back({"maxval.ppm", text_bytes("P6 8 8 4294967296\n"), "maximum value is more than 65535"});
  // formats left out
  cases.push_back({"digit.hdr", text_bytes("#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y 8 +X 8\n"),
                   ": not a picture kiln reads: a Radiance HDR picture (kiln reads PNG, "});
  cases.push_back({"digit.psd", concat(text_bytes("8BPS"), Bytes(40, 1)), "a Photoshop (PSD) picture"});
  for (const Hostile& h : cases) {
    const std::string path = dir.write(h.name, h.bytes).string();
    const std::string message = error_of([&] { load_digit_image(path); });
    CHECK_MESSAGE(contains(message, path), message);
    CHECK_MESSAGE(contains(message, h.expected), message);
  }

  // what fuzzing found (tests/fuzz/README.md): every one refused, none decoded
  int found = 0;
  for (const auto& entry : std::filesystem::directory_iterator(KILN_FUZZ_PICTURES)) {
    if (!entry.path().filename().string().starts_with("found-")) continue;
    ++found;
    CAPTURE(entry.path());
    CHECK_THROWS_AS(load_digit_image(entry.path().string()), DataError);
  }
  CHECK(found >= 12);
}

TEST_CASE("image: JPEGs as libjpeg writes them, progressive and CMYK (Adobe), come back as the digit") {
  TempDir dir;
  const Picture picture = draw(kOne, 64, 64);
  const std::vector<uint8_t> grey = encode(picture, Layout::grey, Polarity::dark_on_light),
                             rgb = encode(picture, Layout::rgb, Polarity::dark_on_light);
  std::vector<uint8_t> cmyk;  // black ink alone: C, M, Y none (255 stored), K the grey level
  for (uint8_t g : grey) cmyk.insert(cmyk.end(), {255, 255, 255, g});
  const Tensor reference = load_digit_image(small_picture(dir, "digit", Format::png));
  for (const std::string& path : {write_libjpeg(dir, "grey", 64, 64, JCS_GRAYSCALE, 1, grey, false),
                                  write_libjpeg(dir, "grey-progressive", 64, 64, JCS_GRAYSCALE, 1, grey, true),
                                  write_libjpeg(dir, "rgb-progressive", 64, 64, JCS_RGB, 3, rgb, true),
                                  write_libjpeg(dir, "cmyk", 64, 64, JCS_CMYK, 4, cmyk, false),
                                  write_libjpeg(dir, "cmyk-progressive", 64, 64, JCS_CMYK, 4, cmyk, true)}) {
    CAPTURE(path);
    CHECK(difference(load_digit_image(path), reference).mean < 0.03);  // JPEG's loss at quality 95
  }
  // The digit's loader finds the ink's polarity itself, so it would take an inverted CMYK too: the
  // decoded RGB must be the grey levels written, not 255 minus them.
  for (bool progressive : {false, true}) {
    CAPTURE(progressive);
    const std::string path = write_libjpeg(dir, "cmyk-rgb", 64, 64, JCS_CMYK, 4, cmyk, progressive);
    const Bytes bytes = read_file(path);
    const DecodedPicture decoded = decode_picture(bytes, path);
    REQUIRE(decoded.size.channels == 3);
    double off = 0, off_inverted = 0;
    for (size_t i = 0; i < grey.size(); ++i)
      for (int c = 0; c < 3; ++c) {
        const int v = decoded.pixels.get()[3 * i + static_cast<size_t>(c)];
        off += std::abs(v - grey[i]), off_inverted += std::abs(v - (255 - grey[i]));
      }
    const double samples = 3.0 * static_cast<double>(grey.size());
    CHECK(off / samples < 4.0);             // JPEG's loss at quality 95, in levels of 255
    CHECK(off_inverted / samples > 100.0);  // and far from the inverse (the picture is mostly paper)
  }
}

TEST_CASE("image: an empty file, and a valid header over garbage, are refused by name") {
  TempDir dir;
  const std::string empty = dir.write("empty.png", {}).string();
  std::string message = error_of([&] { load_digit_image(empty); });
  CHECK_MESSAGE(contains(message, empty), message);
  CHECK_MESSAGE(contains(message, "empty file (0 bytes)"), message);

  // A PNG whose compressed pixels are replaced by bytes that are not zlib data.
  Bytes png = read_file(small_picture(dir, "digit", Format::png));
  const size_t idat = find(png, text_bytes("IDAT"));
  for (size_t i = idat + 4; i < png.size() - 16; ++i) png[i] = static_cast<uint8_t>(i * 131 + 17);
  const std::string garbled = dir.write("garbled.png", png).string();
  message = error_of([&] { load_digit_image(garbled); });
  CHECK_MESSAGE(contains(message, garbled + ": cannot decode: Corrupt PNG"), message);
}

TEST_CASE("image: the reason given is the picture's own, not one an earlier picture or format left behind") {
  TempDir dir;
  // A JPEG whose scan names a component (0x10) that its frame does not have: libjpeg says so (stb
  // failed on it without a reason, after ruling PNG out: "Not a PNG").
  Bytes jpeg = read_file(small_picture(dir, "digit", Format::jpeg));
  jpeg[find(jpeg, {0xFF, 0xDA}) + 5] = 0x10;  // the marker, its length, the count, the first component
  const std::string bad_scan = dir.write("bad-scan.jpg", jpeg).string();
  // A PNG whose compressed pixels are not zlib data: stb_image says "Corrupt PNG".
  Bytes png = read_file(small_picture(dir, "digit", Format::png));
  const size_t idat = find(png, text_bytes("IDAT"));
  for (size_t i = idat + 4; i < png.size() - 16; ++i) png[i] = static_cast<uint8_t>(i * 131 + 17);
  const std::string garbled = dir.write("garbled.png", png).string();

  for (const std::string& path : {bad_scan, garbled, bad_scan}) {
    const std::string message = error_of([&] { load_digit_image(path); });
    CAPTURE(message);
    if (path == garbled) {
      CHECK(contains(message, path + ": cannot decode: Corrupt PNG"));
    } else {
      CHECK(contains(message, path + ": cannot decode: Invalid component ID 16 in SOS"));
      CHECK(!contains(message, "PNG"));
    }
  }
}
