// The drawing behind apps/mnist/plot.h, in the order a chart is built: a bitmap font, an RGB
// canvas with anti-aliased strokes, tick choice, then the layout of one chart panel. The PNG itself
// is encoded by stb_image_write.
#include "apps/mnist/plot.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "kiln/core/error.h"
#include "kiln/core/file.h"

#include "apps/mnist/stb.h"

namespace kiln::apps {
namespace {

// ---------------------------------------------------------------------------------------------
// Font: one glyph per ASCII character 32..126, 5 columns x 9 rows. Rows 0-6 hold capitals and
// digits (the baseline lies under row 6), rows 7-8 the descenders of g j p q y , _. In each row
// byte, bit 4 is the leftmost column. Drawn at 2x, capitals are 10 x 14 pixels.
constexpr int kGlyphRows = 9;
constexpr int kGlyphCols = 5;
constexpr int kCapRows = 7;
constexpr std::array<std::array<uint8_t, kGlyphRows>, 95> kFont = {{
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},  // ' '
    {0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x04, 0x00, 0x00},  // '!'
    {0x0A, 0x0A, 0x0A, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},  // '"'
    {0x0A, 0x0A, 0x1F, 0x0A, 0x1F, 0x0A, 0x0A, 0x00, 0x00},  // '#'
    {0x04, 0x0F, 0x14, 0x0E, 0x05, 0x1E, 0x04, 0x00, 0x00},  // '$'
    {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03, 0x00, 0x00},  // '%'
    {0x0C, 0x12, 0x14, 0x08, 0x15, 0x12, 0x0D, 0x00, 0x00},  // '&'
    {0x04, 0x04, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},  // '\''
    {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02, 0x00, 0x00},  // '('
    {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08, 0x00, 0x00},  // ')'
    {0x00, 0x04, 0x15, 0x0E, 0x15, 0x04, 0x00, 0x00, 0x00},  // '*'
    {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00, 0x00, 0x00},  // '+'
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08, 0x00},  // ','
    {0x00, 0x00, 0x00, 0x1E, 0x00, 0x00, 0x00, 0x00, 0x00},  // '-'
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C, 0x00, 0x00},  // '.'
    {0x01, 0x01, 0x02, 0x04, 0x08, 0x10, 0x10, 0x00, 0x00},  // '/'
    {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E, 0x00, 0x00},  // '0'
    {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E, 0x00, 0x00},  // '1'
    {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F, 0x00, 0x00},  // '2'
    {0x0E, 0x11, 0x01, 0x06, 0x01, 0x11, 0x0E, 0x00, 0x00},  // '3'
    {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02, 0x00, 0x00},  // '4'
    {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E, 0x00, 0x00},  // '5'
    {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E, 0x00, 0x00},  // '6'
    {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08, 0x00, 0x00},  // '7'
    {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E, 0x00, 0x00},  // '8'
    {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C, 0x00, 0x00},  // '9'
    {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00, 0x00, 0x00},  // ':'
    {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x04, 0x08, 0x00, 0x00},  // ';'
    {0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02, 0x00, 0x00},  // '<'
    {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00, 0x00, 0x00},  // '='
    {0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08, 0x00, 0x00},  // '>'
    {0x0E, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04, 0x00, 0x00},  // '?'
    {0x0E, 0x11, 0x17, 0x15, 0x17, 0x10, 0x0E, 0x00, 0x00},  // '@'
    {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11, 0x00, 0x00},  // 'A'
    {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E, 0x00, 0x00},  // 'B'
    {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E, 0x00, 0x00},  // 'C'
    {0x1E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1E, 0x00, 0x00},  // 'D'
    {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F, 0x00, 0x00},  // 'E'
    {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10, 0x00, 0x00},  // 'F'
    {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F, 0x00, 0x00},  // 'G'
    {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11, 0x00, 0x00},  // 'H'
    {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E, 0x00, 0x00},  // 'I'
    {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C, 0x00, 0x00},  // 'J'
    {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11, 0x00, 0x00},  // 'K'
    {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F, 0x00, 0x00},  // 'L'
    {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11, 0x00, 0x00},  // 'M'
    {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11, 0x00, 0x00},  // 'N'
    {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E, 0x00, 0x00},  // 'O'
    {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10, 0x00, 0x00},  // 'P'
    {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D, 0x00, 0x00},  // 'Q'
    {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11, 0x00, 0x00},  // 'R'
    {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E, 0x00, 0x00},  // 'S'
    {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x00},  // 'T'
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E, 0x00, 0x00},  // 'U'
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04, 0x00, 0x00},  // 'V'
    {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A, 0x00, 0x00},  // 'W'
    {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11, 0x00, 0x00},  // 'X'
    {0x11, 0x11, 0x0A, 0x04, 0x04, 0x04, 0x04, 0x00, 0x00},  // 'Y'
    {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F, 0x00, 0x00},  // 'Z'
    {0x0E, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0E, 0x00, 0x00},  // '['
    {0x10, 0x10, 0x08, 0x04, 0x02, 0x01, 0x01, 0x00, 0x00},  // '\\'
    {0x0E, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0E, 0x00, 0x00},  // ']'
    {0x04, 0x0A, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},  // '^'
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F, 0x00},  // '_'
    {0x08, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},  // '`'
    {0x00, 0x00, 0x0E, 0x01, 0x0F, 0x11, 0x0F, 0x00, 0x00},  // 'a'
    {0x10, 0x10, 0x1E, 0x11, 0x11, 0x11, 0x1E, 0x00, 0x00},  // 'b'
    {0x00, 0x00, 0x0E, 0x11, 0x10, 0x11, 0x0E, 0x00, 0x00},  // 'c'
    {0x01, 0x01, 0x0F, 0x11, 0x11, 0x11, 0x0F, 0x00, 0x00},  // 'd'
    {0x00, 0x00, 0x0E, 0x11, 0x1F, 0x10, 0x0E, 0x00, 0x00},  // 'e'
    {0x06, 0x08, 0x08, 0x1C, 0x08, 0x08, 0x08, 0x00, 0x00},  // 'f'
    {0x00, 0x00, 0x0F, 0x11, 0x11, 0x11, 0x0F, 0x01, 0x0E},  // 'g'
    {0x10, 0x10, 0x1E, 0x11, 0x11, 0x11, 0x11, 0x00, 0x00},  // 'h'
    {0x04, 0x00, 0x0C, 0x04, 0x04, 0x04, 0x0E, 0x00, 0x00},  // 'i'
    {0x02, 0x00, 0x06, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C},  // 'j'
    {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12, 0x00, 0x00},  // 'k'
    {0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E, 0x00, 0x00},  // 'l'
    {0x00, 0x00, 0x1A, 0x15, 0x15, 0x15, 0x15, 0x00, 0x00},  // 'm'
    {0x00, 0x00, 0x1E, 0x11, 0x11, 0x11, 0x11, 0x00, 0x00},  // 'n'
    {0x00, 0x00, 0x0E, 0x11, 0x11, 0x11, 0x0E, 0x00, 0x00},  // 'o'
    {0x00, 0x00, 0x1E, 0x11, 0x11, 0x11, 0x1E, 0x10, 0x10},  // 'p'
    {0x00, 0x00, 0x0F, 0x11, 0x11, 0x11, 0x0F, 0x01, 0x01},  // 'q'
    {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10, 0x00, 0x00},  // 'r'
    {0x00, 0x00, 0x0F, 0x10, 0x0E, 0x01, 0x1E, 0x00, 0x00},  // 's'
    {0x00, 0x08, 0x1C, 0x08, 0x08, 0x08, 0x06, 0x00, 0x00},  // 't'
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0D, 0x00, 0x00},  // 'u'
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x0A, 0x04, 0x00, 0x00},  // 'v'
    {0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0A, 0x00, 0x00},  // 'w'
    {0x00, 0x00, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x00, 0x00},  // 'x'
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x11, 0x0F, 0x01, 0x0E},  // 'y'
    {0x00, 0x00, 0x1F, 0x02, 0x04, 0x08, 0x1F, 0x00, 0x00},  // 'z'
    {0x03, 0x04, 0x04, 0x08, 0x04, 0x04, 0x03, 0x00, 0x00},  // '{'
    {0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04},  // '|'
    {0x18, 0x04, 0x04, 0x02, 0x04, 0x04, 0x18, 0x00, 0x00},  // '}'
    {0x00, 0x00, 0x08, 0x15, 0x02, 0x00, 0x00, 0x00, 0x00},  // '~'
}};

const std::array<uint8_t, kGlyphRows>& glyph(char c) {
  const bool printable = c >= ' ' && c <= '~';
  return kFont[static_cast<size_t>((printable ? c : '?') - ' ')];
}

// Text is proportional: each glyph spans its inked columns plus one blank column; a space is 3
// columns. Labels like "0.1" stay compact this way.
struct GlyphSpan {
  int first_col, width;
};

GlyphSpan glyph_span(char c) {
  uint8_t ink = 0;
  for (uint8_t row : glyph(c)) ink = static_cast<uint8_t>(ink | row);
  if (ink == 0) return {0, 3};
  int first = 0, last = kGlyphCols - 1;
  while (!(ink & (0x10 >> first))) ++first;
  while (!(ink & (0x10 >> last))) --last;
  return {first, last - first + 1};
}

constexpr int kScale = 2;                       // font pixels to image pixels
constexpr int kTextHeight = kCapRows * kScale;  // capitals and digits
constexpr int kDescent = (kGlyphRows - kCapRows) * kScale;

int text_width(std::string_view text) {
  int columns = 0;
  for (char c : text) columns += glyph_span(c).width + 1;
  return std::max(0, columns - 1) * kScale;
}

// ---------------------------------------------------------------------------------------------
// Canvas: 8-bit RGB, row-major, white to start with.
struct Rgb {
  uint8_t r, g, b;
};

constexpr Rgb to_rgb(uint32_t hex) {
  return {static_cast<uint8_t>(hex >> 16 & 0xFF), static_cast<uint8_t>(hex >> 8 & 0xFF),
          static_cast<uint8_t>(hex & 0xFF)};
}

constexpr Rgb kWhite = to_rgb(0xFFFFFF);
constexpr Rgb kInk = to_rgb(0x222222);        // titles, axis labels, legend names
constexpr Rgb kTickInk = to_rgb(0x444444);    // tick labels
constexpr Rgb kFrame = to_rgb(0x555555);      // plot frame and tick marks
constexpr Rgb kGrid = to_rgb(0xE4E4E4);
constexpr Rgb kLegendEdge = to_rgb(0xC8C8C8);
constexpr Rgb kNoData = to_rgb(0x999999);

struct Rect {  // [x0, x1) x [y0, y1)
  int x0, y0, x1, y1;
  int width() const { return x1 - x0; }
  int height() const { return y1 - y0; }
};

class Canvas {
 public:
  Canvas(int width, int height)
      : width_(width), height_(height), pixels_(static_cast<size_t>(width) * height * 3, 255) {}

  int width() const { return width_; }
  int height() const { return height_; }
  const uint8_t* data() const { return pixels_.data(); }

  // Mixes `color` into pixel (x, y) with weight alpha in [0, 1]; pixels off the canvas are skipped.
  void blend(int x, int y, Rgb color, double alpha) {
    if (x < 0 || y < 0 || x >= width_ || y >= height_ || alpha <= 0) return;
    alpha = std::min(alpha, 1.0);
    uint8_t* p = &pixels_[(static_cast<size_t>(y) * width_ + x) * 3];
    const uint8_t src[3] = {color.r, color.g, color.b};
    for (int i = 0; i < 3; ++i)
      p[i] = static_cast<uint8_t>(std::lround(p[i] + (src[i] - p[i]) * alpha));
  }

  void fill(Rect r, Rgb color) {
    for (int y = r.y0; y < r.y1; ++y)
      for (int x = r.x0; x < r.x1; ++x) blend(x, y, color, 1.0);
  }

  // The 1-pixel outline just inside r.
  void outline(Rect r, Rgb color) {
    fill({r.x0, r.y0, r.x1, r.y0 + 1}, color);
    fill({r.x0, r.y1 - 1, r.x1, r.y1}, color);
    fill({r.x0, r.y0, r.x0 + 1, r.y1}, color);
    fill({r.x1 - 1, r.y0, r.x1, r.y1}, color);
  }

 private:
  int width_, height_;
  std::vector<uint8_t> pixels_;  // [height, width, 3]
};

enum class Direction { right, up };

// Draws text at kScale. Direction::right: (x, y) is the top-left corner of the capitals.
// Direction::up (a y-axis label, read bottom to top): (x, y) is the bottom-left corner, and the
// tops of the letters face left.
void draw_text(Canvas& canvas, int x, int y, std::string_view text, Rgb color,
               Direction direction = Direction::right, bool bold = false) {
  int column = 0;  // in font pixels along the text
  for (char c : text) {
    const GlyphSpan span = glyph_span(c);
    const auto& rows = glyph(c);
    for (int row = 0; row < kGlyphRows; ++row)
      for (int col = 0; col < span.width; ++col) {
        if (!(rows[row] & (0x10 >> (span.first_col + col)))) continue;
        const int u = (column + col) * kScale, v = row * kScale;  // text space, v downwards
        const int px = direction == Direction::right ? x + u : x + v;
        const int py = direction == Direction::right ? y + v : y - u - kScale;
        canvas.fill({px, py, px + kScale + (bold ? 1 : 0), py + kScale}, color);
      }
    column += span.width + 1;
  }
}

// Anti-aliased shapes go through a Layer: a coverage value in [0, 1] per pixel of a clip rectangle,
// where overlapping shapes take the larger coverage. Compositing a whole series at once keeps the
// joints of a polyline from darkening where its segments overlap.
struct Point {
  double x, y;  // image coordinates; pixel (i, j) covers [i, i + 1) x [j, j + 1)
};

class Layer {
 public:
  explicit Layer(Rect clip)
      : clip_(clip), coverage_(static_cast<size_t>(clip.width()) * clip.height(), 0.0f) {}

  // A segment with round ends, `width` pixels thick.
  void stroke(Point a, Point b, double width) {
    const double half = width / 2;
    const double dx = b.x - a.x, dy = b.y - a.y, length2 = dx * dx + dy * dy;
    cover(std::min(a.x, b.x) - half, std::min(a.y, b.y) - half, std::max(a.x, b.x) + half,
          std::max(a.y, b.y) + half, [&](double px, double py) {
            // Distance from the pixel centre to the nearest point of the segment.
            double t = length2 > 0 ? ((px - a.x) * dx + (py - a.y) * dy) / length2 : 0;
            t = std::clamp(t, 0.0, 1.0);
            return half + 0.5 - std::hypot(px - a.x - t * dx, py - a.y - t * dy);
          });
  }

  void disc(Point c, double radius) {
    cover(c.x - radius, c.y - radius, c.x + radius, c.y + radius, [&](double px, double py) {
      return radius + 0.5 - std::hypot(px - c.x, py - c.y);
    });
  }

  // Blends `color` into the canvas by coverage and clears the layer. `occupied`, when given, is
  // a [clip height, clip width] mask that gets 1 where the layer left a visible mark.
  void composite(Canvas& canvas, Rgb color, std::vector<uint8_t>* occupied = nullptr) {
    for (int y = clip_.y0; y < clip_.y1; ++y)
      for (int x = clip_.x0; x < clip_.x1; ++x) {
        float& c = at(x, y);
        if (c <= 0) continue;
        canvas.blend(x, y, color, c);
        if (occupied && c > 0.1f) (*occupied)[index(x, y)] = 1;
        c = 0;
      }
  }

 private:
  size_t index(int x, int y) const {
    return static_cast<size_t>(y - clip_.y0) * clip_.width() + (x - clip_.x0);
  }
  float& at(int x, int y) { return coverage_[index(x, y)]; }

  // Runs `coverage_at(pixel centre)` over the pixels of the box (grown by one) inside the clip.
  template <class F>
  void cover(double x0, double y0, double x1, double y1, F coverage_at) {
    const int ix0 = std::max(clip_.x0, static_cast<int>(std::floor(x0)) - 1);
    const int iy0 = std::max(clip_.y0, static_cast<int>(std::floor(y0)) - 1);
    const int ix1 = std::min(clip_.x1, static_cast<int>(std::ceil(x1)) + 1);
    const int iy1 = std::min(clip_.y1, static_cast<int>(std::ceil(y1)) + 1);
    for (int y = iy0; y < iy1; ++y)
      for (int x = ix0; x < ix1; ++x) {
        const double c = std::clamp(coverage_at(x + 0.5, y + 0.5), 0.0, 1.0);
        float& slot = at(x, y);
        slot = std::max(slot, static_cast<float>(c));
      }
  }

  Rect clip_;
  std::vector<float> coverage_;  // [clip height, clip width]
};

// ---------------------------------------------------------------------------------------------
// Axes: the range shown and its ticks.
struct Axis {
  double lo = 0, hi = 1;
  std::vector<double> ticks;
  std::vector<std::string> labels;

  double fraction(double v) const { return (v - lo) / (hi - lo); }
};

// The range of the finite values, widened so that constant data gets a visible span, then padded
// by 5% on each side so that points on the extremes are not cut by the frame.
std::pair<double, double> axis_range(double lo, double hi) {
  if (!(lo <= hi)) return {0, 1};  // no finite value at all
  if (hi - lo <= 1e-12 * std::max(1.0, std::abs(hi))) {
    const double pad = lo != 0 ? std::abs(lo) * 0.1 : 1;
    lo -= pad;
    hi += pad;
  }
  const double margin = (hi - lo) * 0.05;
  return {lo - margin, hi + margin};
}

// `step` = mantissa x 10^exponent; labels show exactly the decimals the step needs.
std::string tick_label(double v, double step, int exponent) {
  if (std::abs(v) < step * 1e-6) v = 0;  // no "-0.0" from rounding
  char text[32];
  if (exponent >= -6 && std::abs(v) < 1e7) {
    std::snprintf(text, sizeof text, "%.*f", std::max(0, -exponent), v);
    return text;
  }
  std::snprintf(text, sizeof text, "%.3g", v);
  std::string label = text;  // "1e+08" -> "1e8", "2.5e-07" -> "2.5e-7"
  if (const size_t e = label.find('e'); e != std::string::npos) {
    size_t digits = e + 1;
    if (label[digits] == '+') label.erase(digits, 1);
    if (label[digits] == '-') ++digits;
    while (label[digits] == '0' && digits + 1 < label.size()) label.erase(digits, 1);
  }
  return label;
}

// The finest 1-2-5 step whose labels do not crowd: `fits(step_px, widest_label_px)` decides.
// `integral` axes (epochs, steps) never get steps below 1.
template <class Fits>
Axis make_axis(double lo, double hi, bool integral, int length_px, Fits fits) {
  Axis axis;
  const std::pair<double, double> range = axis_range(lo, hi);
  axis.lo = range.first;
  axis.hi = range.second;
  const double span = axis.hi - axis.lo;
  int exponent = static_cast<int>(std::floor(std::log10(span / 100)));
  if (integral) exponent = std::max(exponent, 0);
  constexpr int kMantissas[] = {1, 2, 5};
  for (int tries = 0; tries < 64; ++tries) {
    const int mantissa = kMantissas[tries % 3];
    if (tries > 0 && tries % 3 == 0) ++exponent;
    const double step = mantissa * std::pow(10.0, exponent);
    const double first = std::ceil(axis.lo / step - 1e-9), last = std::floor(axis.hi / step + 1e-9);
    if (last - first > 200) continue;  // far too many to be the answer
    axis.ticks.clear();
    axis.labels.clear();
    int widest = 0;
    for (double k = first; k <= last; ++k) {
      axis.ticks.push_back(k * step);
      axis.labels.push_back(tick_label(k * step, step, exponent));
      widest = std::max(widest, text_width(axis.labels.back()));
    }
    if (fits(step / span * length_px, widest)) break;
  }
  return axis;
}

// NaN and Inf are skipped, and so are values beyond 1e300, whose spans would overflow a double.
bool plottable(double v) { return std::abs(v) <= 1e300; }

bool all_integral(const std::vector<double>& values) {
  return std::all_of(values.begin(), values.end(),
                     [](double v) { return !plottable(v) || v == std::round(v); });
}

// ---------------------------------------------------------------------------------------------
// One chart in its panel.
constexpr int kPad = 14;        // panel edge to content
constexpr int kTickLength = 5;
constexpr int kTickGap = 6;     // tick mark to its label
constexpr double kStroke = 2.5;  // series line width in pixels
constexpr double kMarkerRadius = 3.5;
constexpr int kMarkerSpacing = 14;  // markers only while points are at least this far apart on average

struct LegendEntry {
  const Series* series;
  bool markers;
};

void draw_legend(Canvas& canvas, Rect plot, const std::vector<LegendEntry>& entries,
                 const std::vector<uint8_t>& occupied) {
  constexpr int kInset = 10, kBoxPad = 8, kRowGap = 8, kSwatch = 28, kSwatchGap = 8;
  int names = 0;
  for (const LegendEntry& e : entries) names = std::max(names, text_width(e.series->name));
  const int n = static_cast<int>(entries.size());
  const int w = kBoxPad * 2 + kSwatch + kSwatchGap + names;
  const int h = kBoxPad * 2 + n * kTextHeight + (n - 1) * kRowGap;

  // The corner whose box covers the fewest series pixels; top right wins ties.
  const Rect corners[] = {
      {plot.x1 - kInset - w, plot.y0 + kInset, plot.x1 - kInset, plot.y0 + kInset + h},
      {plot.x0 + kInset, plot.y0 + kInset, plot.x0 + kInset + w, plot.y0 + kInset + h},
      {plot.x1 - kInset - w, plot.y1 - kInset - h, plot.x1 - kInset, plot.y1 - kInset},
      {plot.x0 + kInset, plot.y1 - kInset - h, plot.x0 + kInset + w, plot.y1 - kInset},
  };
  Rect box = corners[0];
  long best = -1;
  for (const Rect& r : corners) {
    long hidden = 0;
    for (int y = std::max(r.y0, plot.y0); y < std::min(r.y1, plot.y1); ++y)
      for (int x = std::max(r.x0, plot.x0); x < std::min(r.x1, plot.x1); ++x)
        hidden += occupied[static_cast<size_t>(y - plot.y0) * plot.width() + (x - plot.x0)];
    if (best < 0 || hidden < best) {
      best = hidden;
      box = r;
    }
  }

  // Mostly opaque: where no corner is free, the data under the legend still shows faintly.
  for (int y = box.y0; y < box.y1; ++y)
    for (int x = box.x0; x < box.x1; ++x) canvas.blend(x, y, kWhite, 0.85);
  canvas.outline(box, kLegendEdge);
  Layer swatches(box);
  int y = box.y0 + kBoxPad;
  for (const LegendEntry& e : entries) {
    const double mid = y + kTextHeight / 2.0;
    const double sx = box.x0 + kBoxPad;
    swatches.stroke({sx + 1, mid}, {sx + kSwatch - 1, mid}, kStroke + 0.5);
    if (e.markers) swatches.disc({sx + kSwatch / 2.0, mid}, kMarkerRadius);
    swatches.composite(canvas, to_rgb(e.series->rgb));
    draw_text(canvas, box.x0 + kBoxPad + kSwatch + kSwatchGap, y, e.series->name, kInk);
    y += kTextHeight + kRowGap;
  }
}

void draw_chart(Canvas& canvas, const Chart& chart, Rect panel) {
  // Data extents over every plottable point.
  double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
  bool x_integral = true;
  size_t finite_points = 0;
  for (const Series& s : chart.series) {
    x_integral = x_integral && all_integral(s.x);
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!plottable(s.x[i]) || !plottable(s.y[i])) continue;
      xlo = std::min(xlo, s.x[i]);
      xhi = std::max(xhi, s.x[i]);
      ylo = std::min(ylo, s.y[i]);
      yhi = std::max(yhi, s.y[i]);
      ++finite_points;
    }
  }
  x_integral = x_integral && finite_points > 0;

  // Vertical layout first: the y ticks need the plot's height, the left margin their labels.
  Rect plot{};
  plot.y0 = panel.y0 + kPad + (chart.title.empty() ? 0 : kTextHeight + 14);
  plot.y1 = panel.y1 - kPad - kTextHeight - kTickGap - kTickLength -
            (chart.x_label.empty() ? 0 : kTextHeight + kDescent + 10);
  const Axis yaxis = make_axis(ylo, yhi, false, plot.height(), [](double step_px, int) {
    return step_px >= 40;
  });
  int ylabel_width = 0;
  for (const std::string& label : yaxis.labels) ylabel_width = std::max(ylabel_width, text_width(label));
  plot.x0 = panel.x0 + kPad + (chart.y_label.empty() ? 0 : kTextHeight + kDescent + 10) + ylabel_width +
            kTickGap + kTickLength;
  plot.x1 = panel.x1 - kPad - 16;
  const Axis xaxis = make_axis(xlo, xhi, x_integral, plot.width(), [](double step_px, int widest) {
    return step_px >= std::max(widest + 20, 40);
  });

  // Data to image coordinates, pixel centres of the frame's edges at the range's ends.
  auto to_px = [&](double x, double y) {
    return Point{plot.x0 + 0.5 + xaxis.fraction(x) * (plot.width() - 1),
                 plot.y1 - 0.5 - yaxis.fraction(y) * (plot.height() - 1)};
  };

  // Grid, then the series, then frame, ticks and labels over them.
  for (double t : xaxis.ticks) {
    const int x = static_cast<int>(std::floor(to_px(t, 0).x));
    canvas.fill({x, plot.y0, x + 1, plot.y1}, kGrid);
  }
  for (double t : yaxis.ticks) {
    const int y = static_cast<int>(std::floor(to_px(0, t).y));
    canvas.fill({plot.x0, y, plot.x1, y + 1}, kGrid);
  }

  Layer layer(plot);
  std::vector<uint8_t> occupied(static_cast<size_t>(plot.width()) * plot.height(), 0);
  std::vector<LegendEntry> legend;
  for (const Series& s : chart.series) {
    const size_t n = s.x.size();
    auto finite = [&](size_t i) { return i < n && plottable(s.x[i]) && plottable(s.y[i]); };
    size_t count = 0;
    for (size_t i = 0; i < n; ++i) count += finite(i);
    const bool markers = count > 0 && count <= static_cast<size_t>(plot.width() / kMarkerSpacing);
    for (size_t i = 0; i < n; ++i) {
      if (!finite(i)) continue;
      const Point p = to_px(s.x[i], s.y[i]);
      if (finite(i + 1)) layer.stroke(p, to_px(s.x[i + 1], s.y[i + 1]), kStroke);
      const bool isolated = !finite(i + 1) && (i == 0 || !finite(i - 1));
      if (markers || isolated) layer.disc(p, kMarkerRadius);
    }
    layer.composite(canvas, to_rgb(s.rgb), &occupied);
    if (!s.name.empty()) legend.push_back({&s, markers});
  }
  if (finite_points == 0) {
    const std::string_view note = "no data";
    draw_text(canvas, plot.x0 + (plot.width() - text_width(note)) / 2,
              plot.y0 + (plot.height() - kTextHeight) / 2, note, kNoData);
  }

  canvas.outline(plot, kFrame);
  for (size_t i = 0; i < xaxis.ticks.size(); ++i) {
    const int x = static_cast<int>(std::floor(to_px(xaxis.ticks[i], 0).x));
    canvas.fill({x, plot.y1, x + 1, plot.y1 + kTickLength}, kFrame);
    const std::string& label = xaxis.labels[i];
    draw_text(canvas, x - text_width(label) / 2, plot.y1 + kTickLength + kTickGap, label, kTickInk);
  }
  for (size_t i = 0; i < yaxis.ticks.size(); ++i) {
    const int y = static_cast<int>(std::floor(to_px(0, yaxis.ticks[i]).y));
    canvas.fill({plot.x0 - kTickLength, y, plot.x0, y + 1}, kFrame);
    const std::string& label = yaxis.labels[i];
    draw_text(canvas, plot.x0 - kTickLength - kTickGap - text_width(label), y - kTextHeight / 2,
              label, kTickInk);
  }

  if (!chart.title.empty())
    draw_text(canvas, plot.x0 + (plot.width() - text_width(chart.title)) / 2, panel.y0 + kPad,
              chart.title, kInk, Direction::right, /*bold=*/true);
  if (!chart.x_label.empty())
    draw_text(canvas, plot.x0 + (plot.width() - text_width(chart.x_label)) / 2,
              panel.y1 - kPad - kTextHeight - kDescent, chart.x_label, kInk);
  if (!chart.y_label.empty())
    draw_text(canvas, panel.x0 + kPad, plot.y1 - (plot.height() - text_width(chart.y_label)) / 2,
              chart.y_label, kInk, Direction::up);

  if (!legend.empty()) draw_legend(canvas, plot, legend, occupied);
}

}  // namespace

void write_plot_png(const std::string& path, const std::vector<Chart>& charts, int width, int height) {
  KILN_CHECK(!charts.empty(), ValueError, "write_plot_png: no charts to draw");
  const int n = static_cast<int>(charts.size());
  KILN_CHECK(width / n >= 320 && height >= 240 && width <= 16384 && height <= 16384, ValueError,
             "write_plot_png: a ", width, " x ", height, " image leaves ", width / n, " x ", height,
             " pixels to each of ", n, " charts; each needs at least 320 x 240 (and at most 16384 a side)");
  for (const Chart& chart : charts)
    for (const Series& s : chart.series)
      KILN_CHECK(s.x.size() == s.y.size(), ValueError, "write_plot_png: series '", s.name, "' of chart '",
                 chart.title, "' has ", s.x.size(), " x values but ", s.y.size(), " y values");

  Canvas canvas(width, height);
  for (int i = 0; i < n; ++i)
    draw_chart(canvas, charts[static_cast<size_t>(i)], Rect{i * width / n, 0, (i + 1) * width / n, height});

  // Encoded in memory, then written whole: a full disk leaves the last plot, not half of a new one.
  std::string png;
  auto append = [](void* context, void* data, int size) {
    static_cast<std::string*>(context)->append(static_cast<const char*>(data), static_cast<size_t>(size));
  };
  KILN_CHECK(stbi_write_png_to_func(append, &png, width, height, 3, canvas.data(), width * 3) != 0, Error,
             "write_plot_png: encoding the ", width, " x ", height, " PNG for '", path, "' failed");
  write_file_atomically(path, png);
}

}  // namespace kiln::apps
