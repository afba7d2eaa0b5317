#include "train/loop_parts.h"

#include <fmt/format.h>

#include <cmath>

namespace tessera::train::loop {

void report_epoch(const EpochMetrics& m, int epochs, bool progress, bool has_val,
                  std::ofstream& metrics_file) {
  if (progress) {
    std::fprintf(stderr, "epoch %d/%d: train loss %.4f, train acc %.4f", m.epoch, epochs,
                 m.train_loss, m.train_acc);
    if (has_val) std::fprintf(stderr, ", val loss %.4f, val acc %.4f", m.val_loss, m.val_acc);
    std::fprintf(stderr, " (%.2f s)\n", m.seconds);
  }
  if (metrics_file.is_open()) {
    auto num = [](double v) { return std::isnan(v) ? std::string("null") : fmt::format("{:.6g}", v); };
    metrics_file << fmt::format(
        "{{\"epoch\": {}, \"train_loss\": {}, \"train_acc\": {}, \"val_loss\": {}, "
        "\"val_acc\": {}, \"seconds\": {:.3f}, \"train_seconds\": {:.3f}}}\n",
        m.epoch, num(m.train_loss), num(m.train_acc), num(m.val_loss), num(m.val_acc), m.seconds,
        m.train_seconds);
    metrics_file.flush();
  }
}

}  // namespace tessera::train::loop
