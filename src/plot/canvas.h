#pragma once
// A small drawing surface written to an .svg or .png file, with Cairo behind it, for the
// training chart (plot.cpp) and the charts of `tessera bench`. Its header has no Cairo in it.
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tessera::detail {

struct Rgb {
  double r, g, b;
};
inline constexpr Rgb kInk{0.15, 0.15, 0.15}, kGrid{0.88, 0.88, 0.88}, kWhite{1, 1, 1};

// The i-th color of a palette that tells up to eight series apart.
Rgb palette(int i);
// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `count` ticks over span.
double tick_step(double span, int count);
// The ticks 0, step, 2 step, ... up to `span` for a tick_step of at least `min_step`: just
// {0} for a span that is not a positive finite number or too small to divide.
std::vector<double> ticks(double span, int count, double min_step = 0);
// A short tick label: 3 significant digits, never "-0".
std::string tick_label(double v);

struct Box {
  double x, y, w, h;
};
// The first of `candidates` that the fewest points of `series` (polylines, walked every few
// pixels, so a segment crossing a box counts too; non-finite points lift the pen) fall in:
// where a legend hides the least of the data.
Box least_covered(const std::vector<std::vector<std::pair<double, double>>>& series,
                  const std::vector<Box>& candidates);

class Canvas {
 public:
  // Throws Error naming `op` for an extension other than .svg or .png, IOError when the
  // file cannot be made.
  Canvas(const std::filesystem::path& path, double width, double height, const char* op);
  ~Canvas();
  Canvas(const Canvas&) = delete;
  Canvas& operator=(const Canvas&) = delete;

  void line(double x0, double y0, double x1, double y1, Rgb color, double width = 1);
  // Through the points in order; a point with a non-finite coordinate lifts the pen.
  void polyline(const std::vector<std::pair<double, double>>& points, Rgb color, double width,
                bool dots);
  void rect(double x, double y, double w, double h, Rgb color, bool fill, double width = 1);
  // Text anchored at (x, y): align 0 puts its left (top) edge there, 0.5 its center.
  void text(double x, double y, const std::string& s, double align_x, double align_y,
            double size = 12, Rgb color = kInk);
  // Writes the file. IOError when that fails.
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::detail
