// write_plot_png: the PNG decodes to the size asked for, each series' colour shows up in its own
// chart, awkward data (empty, one point, constant, NaN/Inf, 10k points) still draws, and bad input
// or an unwritable path is a kiln error.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "apps/mnist/plot.h"
#include "kiln/core/error.h"

#include "apps/mnist/stb.h"
#include "tests/temp_dir.h"

using namespace kiln;
using namespace kiln::apps;

namespace {

namespace fs = std::filesystem;
using kiln::test::TempDir;

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // [height, width, 3]

  // Pixels of exactly colour `hex` in columns [x0, x1): a line's core and its markers are drawn
  // at full coverage, so they carry the series' colour unblended.
  int count(uint32_t hex, int x0, int x1) const {
    int n = 0;
    for (int y = 0; y < height; ++y)
      for (int x = x0; x < x1; ++x) {
        const uint8_t* p = &rgb[(static_cast<size_t>(y) * width + x) * 3];
        n += (uint32_t{p[0]} << 16 | uint32_t{p[1]} << 8 | p[2]) == hex;
      }
    return n;
  }
  int count(uint32_t hex) const { return count(hex, 0, width); }
};

Image read_png(const fs::path& file) {
  Image image;
  int channels = 0;
  stbi_uc* pixels = stbi_load(file.string().c_str(), &image.width, &image.height, &channels, 3);
  REQUIRE_MESSAGE(pixels != nullptr, "stb_image cannot read ", file.string(), ": ", stbi_failure_reason());
  image.rgb.assign(pixels, pixels + static_cast<size_t>(image.width) * image.height * 3);
  stbi_image_free(pixels);
  return image;
}

// Per-epoch curves as mnist-train records them.
std::vector<Chart> training_charts() {
  Series train{"train loss", {}, {}, plot_blue}, test{"test loss", {}, {}, plot_orange};
  Series accuracy{"test accuracy", {}, {}, plot_green};
  for (int epoch = 1; epoch <= 10; ++epoch) {
    train.x.push_back(epoch);
    train.y.push_back(0.35 * std::exp(-0.35 * (epoch - 1)) + 0.02);
    test.x.push_back(epoch);
    test.y.push_back(0.12 * std::exp(-0.25 * (epoch - 1)) + 0.03);
    accuracy.x.push_back(epoch);
    accuracy.y.push_back(0.99 - 0.03 * std::exp(-0.5 * (epoch - 1)));
  }
  return {{"Loss", "epoch", "cross-entropy", {train, test}},
          {"Test accuracy", "epoch", "accuracy", {accuracy}}};
}

}  // namespace

TEST_CASE("write_plot_png: two charts side by side, each series' colour in its own chart") {
  TempDir dir;
  const fs::path file = dir.path() / "curves.png";
  write_plot_png(file.string(), training_charts());

  const Image image = read_png(file);
  REQUIRE(image.width == 1200);
  REQUIRE(image.height == 450);
  CHECK(image.count(0xFFFFFF) < image.width * image.height);

  const int half = image.width / 2;
  CHECK(image.count(plot_blue, 0, half) > 200);
  CHECK(image.count(plot_orange, 0, half) > 200);
  CHECK(image.count(plot_green, half, image.width) > 200);
  CHECK(image.count(plot_blue, half, image.width) == 0);
  CHECK(image.count(plot_green, 0, half) == 0);

  // Text: the dark ink of titles and labels is there in both halves.
  CHECK(image.count(0x222222, 0, half) > 100);
  CHECK(image.count(0x222222, half, image.width) > 100);
}

TEST_CASE("write_plot_png: the size asked for") {
  TempDir dir;
  const fs::path file = dir.path() / "small.png";
  write_plot_png(file.string(), training_charts(), 640, 240);
  const Image image = read_png(file);
  CHECK(image.width == 640);
  CHECK(image.height == 240);
  CHECK(image.count(plot_green) > 0);
}

TEST_CASE("write_plot_png: awkward data still draws") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  Series empty{"empty", {}, {}, 0xAA00AA};
  Series single{"one point", {3}, {0.5}, plot_blue};
  Series constant{"constant", {1, 2, 3, 4}, {0.98, 0.98, 0.98, 0.98}, plot_green};
  Series gaps{"NaN and Inf", {0, 1, 2, 3, 4, 5, nan}, {1, 2, nan, 3, inf, -1, 0}, plot_orange};
  Series unnamed{"", {1, 2}, {-inf, nan}, 0x00AAAA};  // nothing finite, and no legend entry
  Series many{"10k steps", {}, {}, plot_red};
  for (int i = 0; i < 10000; ++i) {
    many.x.push_back(i);
    many.y.push_back(2.3 * std::exp(-i / 2000.0) + 0.1 * std::sin(i * 0.37));
  }
  const std::vector<Chart> charts = {{"Sparse", "x", "y", {empty, single, unnamed}},
                                     {"Constant", "epoch", "accuracy", {constant}},
                                     {"Gaps", "x", "", {gaps}},
                                     {"Many", "step", "loss", {many}},
                                     {"", "", "", {}}};
  TempDir dir;
  const fs::path file = dir.path() / "awkward.png";
  write_plot_png(file.string(), charts, 1600, 400);  // 320 px a chart
  const Image image = read_png(file);
  REQUIRE(image.width == 1600);
  CHECK(image.count(plot_blue, 0, 320) > 10);  // the lone point's marker
  CHECK(image.count(0xAA00AA, 0, 320) > 10);   // the empty series' legend swatch
  CHECK(image.count(0x00AAAA) == 0);
  CHECK(image.count(plot_green, 320, 640) > 200);
  CHECK(image.count(plot_orange, 640, 960) > 100);
  CHECK(image.count(plot_red, 960, 1280) > 1000);
}

TEST_CASE("write_plot_png: bad input and unwritable paths are kiln errors") {
  TempDir dir;
  const std::string missing = (dir.path() / "no_such_folder" / "curves.png").string();
  CHECK_THROWS_WITH_AS(write_plot_png(missing, training_charts()),
                       doctest::Contains("curves.png"), Error);
  CHECK_THROWS_AS(write_plot_png(dir.path().string(), training_charts()), Error);  // a folder
  CHECK_FALSE(fs::exists(missing));

  const std::string file = (dir.path() / "curves.png").string();
  CHECK_THROWS_AS(write_plot_png(file, {}), ValueError);
  CHECK_THROWS_AS(write_plot_png(file, training_charts(), 600, 450), ValueError);  // 300 px a chart
  CHECK_THROWS_AS(write_plot_png(file, training_charts(), 1200, 200), ValueError);
  std::vector<Chart> uneven = training_charts();
  uneven[0].series[1].y.pop_back();
  CHECK_THROWS_WITH_AS(write_plot_png(file, uneven), doctest::Contains("test loss"), ValueError);
  CHECK_FALSE(fs::exists(file));
}
