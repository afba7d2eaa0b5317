// The training chart with Cairo: axes, ticks, a legend and up to four series.
#include "tessera/train/plot.h"

#include <cairo-svg.h>
#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/check.h"

namespace tessera::train {
namespace {

constexpr double kWidth = 800, kHeight = 480;
constexpr double kLeft = 70, kRight = 70, kTop = 46, kBottom = 56;

struct Rgb {
  double r, g, b;
};
constexpr Rgb kStepColor{0.62, 0.74, 0.90}, kTrainColor{0.12, 0.38, 0.75},
    kValLossColor{0.90, 0.45, 0.10}, kAccColor{0.18, 0.60, 0.25}, kInk{0.15, 0.15, 0.15},
    kGrid{0.88, 0.88, 0.88};

// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `count` ticks over span.
double tick_step(double span, int count) {
  const double raw = span / count, mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * mag) return m * mag;
  }
  return 10 * mag;
}

struct Axes {
  double x_max, y_max;  // x: epochs from 0; left y: loss from 0; right y: accuracy 0-1
  double px(double x) const { return kLeft + x / x_max * (kWidth - kLeft - kRight); }
  double py(double y) const { return kHeight - kBottom - y / y_max * (kHeight - kTop - kBottom); }
  double pacc(double a) const { return kHeight - kBottom - a * (kHeight - kTop - kBottom); }
};

void set(cairo_t* cr, Rgb c) { cairo_set_source_rgb(cr, c.r, c.g, c.b); }

void text(cairo_t* cr, double x, double y, const std::string& s, double align_x, double align_y) {
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  cairo_move_to(cr, x - e.width * align_x - e.x_bearing, y - e.height * align_y - e.y_bearing);
  cairo_show_text(cr, s.c_str());
}

std::string label(double v) {
  std::string s = fmt::format("{:.3g}", v);
  return s == "-0" ? "0" : s;
}

// A polyline through the finite points, with optional dots at them.
template <typename Map>
void series(cairo_t* cr, const std::vector<std::pair<double, double>>& pts, Map map, Rgb color,
            double width, bool dots) {
  set(cr, color);
  cairo_set_line_width(cr, width);
  bool pen_down = false;
  for (const auto& [x, y] : pts) {
    if (!std::isfinite(y)) {
      pen_down = false;
      continue;
    }
    const auto [X, Y] = map(x, y);
    pen_down ? cairo_line_to(cr, X, Y) : cairo_move_to(cr, X, Y);
    pen_down = true;
  }
  cairo_stroke(cr);
  if (!dots) return;
  for (const auto& [x, y] : pts) {
    if (!std::isfinite(y)) continue;
    const auto [X, Y] = map(x, y);
    cairo_arc(cr, X, Y, 3, 0, 2 * M_PI);
    cairo_fill(cr);
  }
}

void draw(cairo_t* cr, const std::vector<EpochMetrics>& h, const Tensor& steps,
          const std::string& title) {
  std::vector<double> step_loss;
  if (steps.defined() && steps.numel() > 0) step_loss = steps.to_vector<double>();
  double y_max = 0;
  bool has_val = false;
  for (const EpochMetrics& m : h) {
    for (double v : {m.train_loss, m.val_loss}) {
      if (std::isfinite(v)) y_max = std::max(y_max, v);
    }
    has_val = has_val || std::isfinite(m.val_acc);
  }
  for (double v : step_loss) {
    if (std::isfinite(v)) y_max = std::max(y_max, v);
  }
  y_max = y_max > 0 ? y_max * 1.05 : 1;
  const Axes ax{std::max<double>(static_cast<double>(h.size()), 1), y_max};

  set(cr, {1, 1, 1});
  cairo_paint(cr);
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, 12);
  // Grid, ticks and tick labels.
  cairo_set_line_width(cr, 1);
  const double ystep = tick_step(y_max, 5);
  for (double y = 0; y <= y_max + 1e-12; y += ystep) {
    set(cr, kGrid);
    cairo_move_to(cr, kLeft, ax.py(y));
    cairo_line_to(cr, kWidth - kRight, ax.py(y));
    cairo_stroke(cr);
    set(cr, kInk);
    text(cr, kLeft - 8, ax.py(y), label(y), 1, 0.5);
  }
  const double xstep = std::max(1.0, tick_step(ax.x_max, 10));
  for (double x = 0; x <= ax.x_max + 1e-12; x += xstep) {
    set(cr, kInk);
    text(cr, ax.px(x), kHeight - kBottom + 8, label(x), 0.5, 0);
  }
  if (has_val) {
    for (double a = 0; a <= 1 + 1e-12; a += 0.2) text(cr, kWidth - kRight + 8, ax.pacc(a), label(a), 0, 0.5);
  }
  set(cr, kInk);
  cairo_rectangle(cr, kLeft, kTop, kWidth - kLeft - kRight, kHeight - kTop - kBottom);
  cairo_stroke(cr);
  text(cr, (kWidth + kLeft - kRight) / 2, kHeight - 18, "epoch", 0.5, 0.5);
  text(cr, 18, kTop - 16, "loss", 0, 0.5);
  if (has_val) text(cr, kWidth - 18, kTop - 16, "accuracy", 1, 0.5);
  if (!title.empty()) {
    cairo_set_font_size(cr, 14);
    text(cr, kWidth / 2, 18, title, 0.5, 0.5);
    cairo_set_font_size(cr, 12);
  }

  // Series: steps at x = (i + 1) / steps-per-epoch, epochs at x = epoch.
  const auto loss_map = [&](double x, double y) { return std::pair{ax.px(x), ax.py(y)}; };
  const auto acc_map = [&](double x, double y) { return std::pair{ax.px(x), ax.pacc(y)}; };
  if (!step_loss.empty()) {
    std::vector<std::pair<double, double>> pts;
    const double per_step = ax.x_max / static_cast<double>(step_loss.size());
    for (std::size_t i = 0; i < step_loss.size(); ++i) pts.emplace_back((i + 1) * per_step, step_loss[i]);
    series(cr, pts, loss_map, kStepColor, 0.8, false);
  }
  std::vector<std::pair<double, double>> train, val, acc;
  for (const EpochMetrics& m : h) {
    train.emplace_back(m.epoch, m.train_loss);
    val.emplace_back(m.epoch, m.val_loss);
    acc.emplace_back(m.epoch, m.val_acc);
  }
  series(cr, train, loss_map, kTrainColor, 2, true);
  if (has_val) {
    series(cr, val, loss_map, kValLossColor, 2, true);
    series(cr, acc, acc_map, kAccColor, 2, true);
  }

  // Legend.
  struct Item {
    const char* name;
    Rgb color;
    bool shown;
  };
  const Item items[] = {{"train loss (per step)", kStepColor, !step_loss.empty()},
                        {"train loss", kTrainColor, true},
                        {"validation loss", kValLossColor, has_val},
                        {"validation accuracy", kAccColor, has_val}};
  int shown = 0;
  for (const Item& it : items) shown += it.shown;
  set(cr, {1, 1, 1});  // the legend sits on a white box, over any series
  cairo_rectangle(cr, kWidth - kRight - 198, kTop + 6, 190, 18.0 * shown + 4);
  cairo_fill(cr);
  double y = kTop + 16;
  for (const Item& it : items) {
    if (!it.shown) continue;
    set(cr, it.color);
    cairo_set_line_width(cr, 2);
    cairo_move_to(cr, kWidth - kRight - 190, y);
    cairo_line_to(cr, kWidth - kRight - 166, y);
    cairo_stroke(cr);
    set(cr, kInk);
    text(cr, kWidth - kRight - 158, y, it.name, 0, 0.5);
    y += 18;
  }
}

struct SurfaceDeleter {
  void operator()(cairo_surface_t* s) const { cairo_surface_destroy(s); }
};
struct ContextDeleter {
  void operator()(cairo_t* c) const { cairo_destroy(c); }
};

void check(cairo_status_t status, const std::filesystem::path& path) {
  TESSERA_CHECK(status == CAIRO_STATUS_SUCCESS, IOError, "[plot_history] cannot write '{}': {}",
                path.string(), cairo_status_to_string(status));
}

}  // namespace

void plot_history(const std::vector<EpochMetrics>& history, const std::filesystem::path& path,
                  const Tensor& step_losses, const std::string& title) {
  const std::string ext = path.extension().string();
  TESSERA_CHECK(ext == ".svg" || ext == ".png", Error,
                "[plot_history] '{}': the chart is written as .svg or .png, got '{}'",
                path.string(), ext);
  std::unique_ptr<cairo_surface_t, SurfaceDeleter> surface(
      ext == ".svg" ? cairo_svg_surface_create(path.c_str(), kWidth, kHeight)
                    : cairo_image_surface_create(CAIRO_FORMAT_RGB24, static_cast<int>(kWidth),
                                                 static_cast<int>(kHeight)));
  check(cairo_surface_status(surface.get()), path);
  {
    std::unique_ptr<cairo_t, ContextDeleter> cr(cairo_create(surface.get()));
    draw(cr.get(), history, step_losses, title);
    check(cairo_status(cr.get()), path);
  }
  if (ext == ".png") check(cairo_surface_write_to_png(surface.get(), path.c_str()), path);
  cairo_surface_finish(surface.get());
  check(cairo_surface_status(surface.get()), path);
}

}  // namespace tessera::train
