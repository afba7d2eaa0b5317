#include "bench/charts.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "plot/canvas.h"

namespace tessera::tools::bench {
namespace {

using detail::Canvas;
using detail::kGrid;
using detail::kInk;
using detail::palette;
using detail::tick_label;

constexpr double kWidth = 820, kHeight = 500;
constexpr double kLeft = 80, kRight = 30, kTop = 72, kBottom = 60;
constexpr double kPlotW = kWidth - kLeft - kRight, kPlotH = kHeight - kTop - kBottom;

void frame(Canvas& c, const std::string& title, const std::string& x_label,
           const std::string& y_label) {
  c.rect(kLeft, kTop, kPlotW, kPlotH, kInk, false);
  c.text(kWidth / 2, 20, title, 0.5, 0.5, 14);
  c.text(kLeft + kPlotW / 2, kHeight - 16, x_label, 0.5, 0.5);
  c.text(12, kTop - 12, y_label, 0, 0.5);
}

// One row of color keys under the title, centered.
void legend(Canvas& c, const std::vector<std::string>& names) {
  std::vector<double> widths;
  double total = 0;
  for (const std::string& n : names) {
    widths.push_back(34 + 6.5 * n.size());
    total += widths.back();
  }
  double x = (kWidth - total) / 2;
  for (std::size_t i = 0; i < names.size(); ++i) {
    c.line(x, 44, x + 22, 44, palette(static_cast<int>(i)), 3);
    c.text(x + 27, 44, names[i], 0, 0.5, 11);
    x += widths[i];
  }
}

}  // namespace

void line_chart(const std::filesystem::path& path, const std::string& title,
                const std::string& x_label, const std::string& y_label,
                const std::vector<Series>& series) {
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = 0;
  double y_lo = std::numeric_limits<double>::infinity(), y_hi = 0;
  for (const Series& s : series) {
    for (auto [x, y] : s.points) {
      if (!(x > 0 && y > 0)) continue;
      x_lo = std::min(x_lo, x), x_hi = std::max(x_hi, x);
      y_lo = std::min(y_lo, y), y_hi = std::max(y_hi, y);
    }
  }
  if (!(x_hi > 0)) x_lo = 1, x_hi = 2, y_lo = 1, y_hi = 10;
  const double lx0 = std::floor(std::log2(x_lo)),
               lx1 = std::max(std::ceil(std::log2(x_hi)), lx0 + 1);
  const double ly0 = std::floor(std::log10(y_lo)),
               ly1 = std::max(std::ceil(std::log10(y_hi)), ly0 + 1);
  const auto px = [&](double x) { return kLeft + (std::log2(x) - lx0) / (lx1 - lx0) * kPlotW; };
  const auto py = [&](double y) {
    return kTop + kPlotH - (std::log10(y) - ly0) / (ly1 - ly0) * kPlotH;
  };
  Canvas c(path, kWidth, kHeight, "bench");
  for (double e = ly0; e <= ly1; ++e) {
    c.line(kLeft, py(std::pow(10, e)), kLeft + kPlotW, py(std::pow(10, e)), kGrid);
    c.text(kLeft - 8, py(std::pow(10, e)), tick_label(std::pow(10, e)), 1, 0.5);
  }
  for (double e = lx0; e <= lx1; ++e) {
    // Powers of two as integers (8192, not 8.19e+03).
    c.text(px(std::exp2(e)), kTop + kPlotH + 8,
           e >= 0 ? std::to_string(static_cast<long long>(std::exp2(e))) : tick_label(std::exp2(e)),
           0.5, 0);
  }
  frame(c, title, x_label, y_label);
  std::vector<std::string> names;
  for (std::size_t i = 0; i < series.size(); ++i) {
    std::vector<std::pair<double, double>> pts;
    for (auto [x, y] : series[i].points) {
      pts.emplace_back(x > 0 && y > 0 ? px(x) : NAN, x > 0 && y > 0 ? py(y) : NAN);
    }
    c.polyline(pts, palette(static_cast<int>(i)), 2, true);
    names.push_back(series[i].name);
  }
  legend(c, names);
  c.finish();
}

void bar_chart(const std::filesystem::path& path, const std::string& title,
               const std::string& y_label, const std::vector<std::string>& series_names,
               const std::vector<BarGroup>& groups) {
  double y_max = 0;
  for (const BarGroup& g : groups) {
    for (double v : g.values) {
      if (std::isfinite(v)) y_max = std::max(y_max, v);
    }
  }
  y_max = y_max > 0 ? y_max * 1.08 : 1;  // room for the value labels
  const auto py = [&](double y) { return kTop + kPlotH - y / y_max * kPlotH; };
  Canvas c(path, kWidth, kHeight, "bench");
  for (const double y : detail::ticks(y_max, 5)) {
    c.line(kLeft, py(y), kLeft + kPlotW, py(y), kGrid);
    c.text(kLeft - 8, py(y), tick_label(y), 1, 0.5);
  }
  const double group_w = kPlotW / std::max<std::size_t>(groups.size(), 1);
  const double bar_w = group_w * 0.8 / std::max<std::size_t>(series_names.size(), 1);
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const double x0 = kLeft + g * group_w + group_w * 0.1;
    for (std::size_t s = 0; s < groups[g].values.size(); ++s) {
      const double v = groups[g].values[s];
      if (!std::isfinite(v)) continue;
      c.rect(x0 + s * bar_w, py(v), bar_w * 0.92, py(0) - py(v), palette(static_cast<int>(s)),
             true);
      c.text(x0 + (s + 0.46) * bar_w, py(v) - 3, tick_label(v), 0.5, 1, 10);
    }
    c.text(x0 + group_w * 0.4, kTop + kPlotH + 8, groups[g].label, 0.5, 0, 11);
  }
  frame(c, title, "", y_label);
  legend(c, series_names);
  c.finish();
}

}  // namespace tessera::tools::bench
