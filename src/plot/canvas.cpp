#include "plot/canvas.h"

#include <cairo-svg.h>
#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/check.h"
#include "io/atomic_file.h"

namespace tessera::detail {

Rgb palette(int i) {
  static constexpr Rgb kColors[] = {{0.12, 0.38, 0.75}, {0.90, 0.45, 0.10}, {0.18, 0.60, 0.25},
                                    {0.75, 0.15, 0.20}, {0.50, 0.35, 0.70}, {0.55, 0.40, 0.30},
                                    {0.85, 0.40, 0.65}, {0.45, 0.45, 0.45}};
  return kColors[static_cast<unsigned>(i) % 8];
}

double tick_step(double span, int count) {
  const double raw = span / count, mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * mag) return m * mag;
  }
  return 10 * mag;
}

std::vector<double> ticks(double span, int count, double min_step) {
  if (!(span > 0) || !std::isfinite(span)) return {0.0};
  const double step = std::max(min_step, tick_step(span, count));
  if (!(step > 0) || !std::isfinite(step)) return {0.0};  // a span of a few subnormals
  // Counted, not summed: a sum's rounding error must not decide the last tick (nor can a
  // step too small to move the sum loop forever).
  std::vector<double> out;
  for (int i = 0; i <= 4 * count + 4 && i * step <= span * (1 + 1e-9); ++i) {
    out.push_back(i * step);
  }
  return out;
}

std::string tick_label(double v) {
  std::string s = fmt::format("{:.3g}", v);
  return s == "-0" ? "0" : s;
}

Box least_covered(const std::vector<std::vector<std::pair<double, double>>>& series,
                  const std::vector<Box>& candidates) {
  std::vector<std::size_t> covered(candidates.size(), 0);
  const auto count = [&](double x, double y) {
    for (std::size_t k = 0; k < candidates.size(); ++k) {
      const Box& b = candidates[k];
      covered[k] += x >= b.x && x <= b.x + b.w && y >= b.y && y <= b.y + b.h;
    }
  };
  constexpr double kStep = 3;  // pixels between the points walked along a segment
  for (const auto& points : series) {
    for (std::size_t i = 0; i < points.size(); ++i) {
      const auto [x1, y1] = points[i];
      if (!std::isfinite(x1) || !std::isfinite(y1)) continue;
      count(x1, y1);
      if (i == 0) continue;
      const auto [x0, y0] = points[i - 1];
      if (!std::isfinite(x0) || !std::isfinite(y0)) continue;
      const double length = std::hypot(x1 - x0, y1 - y0);
      const int steps = static_cast<int>(std::min(length / kStep, 10000.0));
      for (int s = 1; s < steps; ++s) {
        const double t = static_cast<double>(s) / steps;
        count(x0 + t * (x1 - x0), y0 + t * (y1 - y0));
      }
    }
  }
  const auto best = std::min_element(covered.begin(), covered.end());
  return candidates[static_cast<std::size_t>(best - covered.begin())];
}

// Note [Charts replaced whole]
// Cairo wrote the chart straight to its path: the SVG surface truncated the file when it
// was made, before a single epoch ran, and the PNG was written in place at the end, so a run
// killed or out of disk left an empty or cut chart where a good one had been. The chart is
// drawn into memory instead and written at finish() in one step, as checkpoints are
// (io::write_file_atomically): the old chart stays until the new one is whole. The
// constructor only checks that the file could be made (a probe, never committed).

namespace {

cairo_status_t append_bytes(void* closure, const unsigned char* data, unsigned int length) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  return CAIRO_STATUS_SUCCESS;
}

}  // namespace

struct Canvas::Impl {
  std::filesystem::path path;
  const char* op;
  bool png;
  std::string bytes;  // the file, as Cairo writes it
  cairo_surface_t* surface = nullptr;
  cairo_t* cr = nullptr;

  void check(cairo_status_t status) const {
    TESSERA_CHECK(status == CAIRO_STATUS_SUCCESS, IOError, "[{}] cannot write '{}': {}", op,
                  path.string(), cairo_status_to_string(status));
  }
  // Runs an io step, its IOError worded as this canvas's: "[op] cannot write 'path': why".
  template <typename F>
  void writing(F&& f) const {
    try {
      f();
    } catch (const IOError& e) {
      TESSERA_CHECK(false, IOError, "[{}] cannot write '{}': {}", op, path.string(),
                    io::reason_of(e, op, path));
    }
  }
  void color(Rgb c) const { cairo_set_source_rgb(cr, c.r, c.g, c.b); }
};

Canvas::Canvas(const std::filesystem::path& path, double width, double height, const char* op)
    : impl_(std::make_unique<Impl>()) {
  const std::string ext = path.extension().string();
  TESSERA_CHECK(ext == ".svg" || ext == ".png", Error,
                "[{}] '{}': charts are written as .svg or .png, got '{}'", op, path.string(), ext);
  impl_->path = path;
  impl_->op = op;
  impl_->png = ext == ".png";
  impl_->writing([&] { io::TempFile probe(io::follow_links(path, op), op); });
  impl_->surface =
      impl_->png ? cairo_image_surface_create(CAIRO_FORMAT_RGB24, static_cast<int>(width),
                                              static_cast<int>(height))
                 : cairo_svg_surface_create_for_stream(append_bytes, &impl_->bytes, width, height);
  if (cairo_surface_status(impl_->surface) != CAIRO_STATUS_SUCCESS) {
    const cairo_status_t status = cairo_surface_status(impl_->surface);
    cairo_surface_destroy(impl_->surface);
    impl_->surface = nullptr;
    impl_->check(status);
  }
  impl_->cr = cairo_create(impl_->surface);
  impl_->color(kWhite);
  cairo_paint(impl_->cr);
  cairo_select_font_face(impl_->cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                         CAIRO_FONT_WEIGHT_NORMAL);
}

Canvas::~Canvas() {
  if (impl_->cr != nullptr) cairo_destroy(impl_->cr);
  if (impl_->surface != nullptr) cairo_surface_destroy(impl_->surface);
}

void Canvas::line(double x0, double y0, double x1, double y1, Rgb color, double width) {
  impl_->color(color);
  cairo_set_line_width(impl_->cr, width);
  cairo_move_to(impl_->cr, x0, y0);
  cairo_line_to(impl_->cr, x1, y1);
  cairo_stroke(impl_->cr);
}

void Canvas::polyline(const std::vector<std::pair<double, double>>& points, Rgb color, double width,
                      bool dots) {
  cairo_t* cr = impl_->cr;
  impl_->color(color);
  cairo_set_line_width(cr, width);
  bool pen_down = false;
  for (const auto& [x, y] : points) {
    if (!std::isfinite(x) || !std::isfinite(y)) {
      pen_down = false;
      continue;
    }
    pen_down ? cairo_line_to(cr, x, y) : cairo_move_to(cr, x, y);
    pen_down = true;
  }
  cairo_stroke(cr);
  if (!dots) return;
  for (const auto& [x, y] : points) {
    if (!std::isfinite(x) || !std::isfinite(y)) continue;
    cairo_arc(cr, x, y, 3, 0, 2 * M_PI);
    cairo_fill(cr);
  }
}

void Canvas::rect(double x, double y, double w, double h, Rgb color, bool fill, double width) {
  impl_->color(color);
  cairo_rectangle(impl_->cr, x, y, w, h);
  if (fill) {
    cairo_fill(impl_->cr);
  } else {
    cairo_set_line_width(impl_->cr, width);
    cairo_stroke(impl_->cr);
  }
}

void Canvas::text(double x, double y, const std::string& s, double align_x, double align_y,
                  double size, Rgb color) {
  cairo_t* cr = impl_->cr;
  cairo_set_font_size(cr, size);
  impl_->color(color);
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  cairo_move_to(cr, x - e.width * align_x - e.x_bearing, y - e.height * align_y - e.y_bearing);
  cairo_show_text(cr, s.c_str());
}

void Canvas::finish() {
  impl_->check(cairo_status(impl_->cr));
  cairo_destroy(impl_->cr);
  impl_->cr = nullptr;
  if (impl_->png) {
    impl_->check(cairo_surface_write_to_png_stream(impl_->surface, append_bytes, &impl_->bytes));
  }
  cairo_surface_finish(impl_->surface);  // an SVG surface writes its last bytes here
  impl_->check(cairo_surface_status(impl_->surface));
  impl_->writing([&] { io::write_file_atomically(impl_->path, impl_->bytes, impl_->op); });
}

}  // namespace tessera::detail
