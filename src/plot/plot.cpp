// The training chart: axes, ticks, a legend and up to four series, drawn on a Canvas.
#include "tessera/train/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "plot/canvas.h"
#include "tessera/error.h"

namespace tessera::train {
namespace {

using detail::Canvas;
using detail::kGrid;
using detail::kInk;
using detail::kWhite;
using detail::Rgb;
using detail::tick_label;
using detail::ticks;

constexpr double kWidth = 800, kHeight = 480;
constexpr double kLeft = 70, kRight = 70, kTop = 46, kBottom = 56;

constexpr Rgb kStepColor{0.62, 0.74, 0.90}, kTrainColor{0.12, 0.38, 0.75},
    kValLossColor{0.90, 0.45, 0.10}, kAccColor{0.18, 0.60, 0.25};

struct Axes {
  // x: epochs from the one before the first drawn (0, or the epoch a run resumed after);
  // left y: loss from 0; right y: accuracy 0-1.
  double x_min, x_max, y_max;
  double px(double x) const {
    return kLeft + (x - x_min) / (x_max - x_min) * (kWidth - kLeft - kRight);
  }
  double py(double y) const { return kHeight - kBottom - y / y_max * (kHeight - kTop - kBottom); }
  double pacc(double a) const { return kHeight - kBottom - a * (kHeight - kTop - kBottom); }
};

using Points = std::vector<std::pair<double, double>>;

void draw(Canvas& c, const std::vector<EpochMetrics>& h, const Tensor& steps,
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
  // A resumed run's history starts after the epochs it resumed from.
  const double x_min = h.empty() ? 0 : std::max(0, h.front().epoch - 1);
  const double x_last = h.empty() ? 0 : h.back().epoch;
  const Axes ax{x_min, std::max(x_last, x_min + 1), y_max};

  // Grid, ticks and tick labels.
  for (const double y : ticks(y_max, 5)) {
    c.line(kLeft, ax.py(y), kWidth - kRight, ax.py(y), kGrid);
    c.text(kLeft - 8, ax.py(y), tick_label(y), 1, 0.5);
  }
  for (const double x : ticks(ax.x_max - ax.x_min, 10, 1.0)) {
    c.text(ax.px(ax.x_min + x), kHeight - kBottom + 8, tick_label(ax.x_min + x), 0.5, 0);
  }
  if (has_val) {
    for (const double a : ticks(1.0, 5)) {
      c.text(kWidth - kRight + 8, ax.pacc(a), tick_label(a), 0, 0.5);
    }
  }
  c.rect(kLeft, kTop, kWidth - kLeft - kRight, kHeight - kTop - kBottom, kInk, false);
  c.text((kWidth + kLeft - kRight) / 2, kHeight - 18, "epoch", 0.5, 0.5);
  c.text(18, kTop - 16, "loss", 0, 0.5);
  if (has_val) c.text(kWidth - 18, kTop - 16, "accuracy", 1, 0.5);
  if (!title.empty()) c.text(kWidth / 2, 18, title, 0.5, 0.5, 14);

  // Series: steps at x = (i + 1) / steps-per-epoch, epochs at x = epoch.
  Points step_pts;
  if (!step_loss.empty()) {
    const double per_step = (ax.x_max - ax.x_min) / static_cast<double>(step_loss.size());
    for (std::size_t i = 0; i < step_loss.size(); ++i) {
      step_pts.emplace_back(ax.px(ax.x_min + (i + 1) * per_step), ax.py(step_loss[i]));
    }
    c.polyline(step_pts, kStepColor, 0.8, false);
  }
  Points train, val, acc;
  for (const EpochMetrics& m : h) {
    train.emplace_back(ax.px(m.epoch), ax.py(m.train_loss));
    val.emplace_back(ax.px(m.epoch), ax.py(m.val_loss));
    acc.emplace_back(ax.px(m.epoch), ax.pacc(m.val_acc));
  }
  c.polyline(train, kTrainColor, 2, true);
  if (has_val) {
    c.polyline(val, kValLossColor, 2, true);
    c.polyline(acc, kAccColor, 2, true);
  }

  // Legend, on a white box where it hides the fewest points of the series (the top right
  // covered the validation accuracy's last epochs in most runs).
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
  const double w = 190, tall = 18.0 * shown + 4, inset = 8;
  const double left = kLeft + inset, right = kWidth - kRight - inset - w;
  const double top = kTop + 6, bottom = kHeight - kBottom - inset - tall;
  const double middle = (top + bottom) / 2;
  std::vector<Points> series{train};
  if (has_val) {
    series.push_back(val);
    series.push_back(acc);
  }
  if (!step_loss.empty()) series.push_back(step_pts);
  const detail::Box box = detail::least_covered(series, {{right, top, w, tall},
                                                         {right, bottom, w, tall},
                                                         {left, top, w, tall},
                                                         {left, bottom, w, tall},
                                                         {right, middle, w, tall},
                                                         {left, middle, w, tall}});
  c.rect(box.x, box.y, box.w, box.h, kWhite, true);
  double y = box.y + 10;
  for (const Item& it : items) {
    if (!it.shown) continue;
    c.line(box.x + 8, y, box.x + 32, y, it.color, 2);
    c.text(box.x + 40, y, it.name, 0, 0.5);
    y += 18;
  }
}

// Whether `s` is well-formed UTF-8 (Cairo refuses other text, and only once the file is
// made: the error read "cannot write" and left a chart behind).
bool valid_utf8(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const std::size_t len = b < 0x80           ? 1
                            : (b >> 5) == 0x6  ? 2
                            : (b >> 4) == 0xe  ? 3
                            : (b >> 3) == 0x1e ? 4
                                               : 0;
    if (len == 0 || i + len > s.size()) return false;
    std::uint32_t cp = len == 1 ? b : b & (0x7f >> len);
    for (std::size_t k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c >> 6) != 0x2) return false;
      cp = (cp << 6) | (c & 0x3f);
    }
    const std::uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

}  // namespace

void plot_history(const std::vector<EpochMetrics>& history, const std::filesystem::path& path,
                  const Tensor& step_losses, const std::string& title) {
  if (!valid_utf8(title)) {
    throw Error(
        "[plot_history] the title is not valid UTF-8; nothing was written. Give it as "
        "UTF-8 text");
  }
  Canvas canvas(path, kWidth, kHeight, "plot_history");
  draw(canvas, history, step_losses, title);
  canvas.finish();
}

}  // namespace tessera::train
