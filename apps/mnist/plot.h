// Line charts as a PNG, for `mnist-train --plot FILE`: the training curves a person can open in
// any image viewer. Drawn pixel by pixel (anti-aliased lines, a built-in bitmap font), so the app
// needs no plotting library, only stb_image_write to encode the PNG.
//
// Each chart gets a white panel with a frame, light grid lines at "nice" ticks (1, 2 or 5 x 10^k),
// numeric tick labels, its title and axis labels, and a legend of the named series placed in the
// corner of the plot that hides the fewest data. Points with a NaN or infinite coordinate are
// skipped and break the line there; a point with no finite neighbour still shows as a marker.
// Markers are drawn while a series has few enough points that they stay apart.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::apps {

struct Series {
  std::string name;        // legend entry; an empty name leaves the series out of the legend
  std::vector<double> x, y;  // the same length
  uint32_t rgb;            // 0xRRGGBB
};

struct Chart {
  std::string title, x_label, y_label;
  std::vector<Series> series;
};

// Colours that stay apart on white (matplotlib's first four).
inline constexpr uint32_t plot_blue = 0x1F77B4;
inline constexpr uint32_t plot_orange = 0xFF7F0E;
inline constexpr uint32_t plot_green = 0x2CA02C;
inline constexpr uint32_t plot_red = 0xD62728;

// Renders the charts side by side (e.g. loss on the left, accuracy on the right), each in a
// width / charts.size() x height panel, into one RGB PNG at `path`.
// ValueError: no charts, a panel smaller than 320 x 240, or a series whose x and y differ in length.
// IoError: the file cannot be written (a full disk, a missing folder, not a regular file); it is
// written whole (core/file.h), so the plot there before stays until the new one is complete.
void write_plot_png(const std::string& path, const std::vector<Chart>& charts, int width = 1200,
                    int height = 450);

}  // namespace kiln::apps
