#include "train/loop_parts.h"

#include <fmt/format.h>

#include <cmath>

#include "core/check.h"

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
    auto num = [](double v) {
      return std::isfinite(v) ? fmt::format("{:.6g}", v) : std::string("null");
    };
    metrics_file << fmt::format(
        "{{\"epoch\": {}, \"train_loss\": {}, \"train_acc\": {}, \"val_loss\": {}, "
        "\"val_acc\": {}, \"seconds\": {:.3f}, \"train_seconds\": {:.3f}}}\n",
        m.epoch, num(m.train_loss), num(m.train_acc), num(m.val_loss), num(m.val_acc), m.seconds,
        m.train_seconds);
    metrics_file.flush();
  }
  check_finite(m, has_val);
}

// Note [Divergence on the device]: the step losses are summed on the device and read once
// per epoch (Note [Metrics on the device]); a NaN or infinity in any step's loss makes that
// sum non-finite, so one check here sees every step's loss without a host wait per step. On
// several ranks the sum was reduced over all of them first, so every rank throws the same.
void check_finite(const EpochMetrics& m, bool has_val) {
  const bool train_bad = !std::isfinite(m.train_loss);
  TESSERA_CHECK(!train_bad && !(has_val && std::isnan(m.val_loss)), NonFiniteError,
                "[Trainer] training diverged in epoch {}: the {} loss is {} (a step's loss became "
                "NaN or infinite). Stopped; the model's parameters are probably not finite. Try a "
                "lower learning rate (--lr), gradient clipping (--clip), or a smaller batch",
                m.epoch, train_bad ? "mean training" : "validation",
                std::isnan(train_bad ? m.train_loss : m.val_loss) ? "NaN" : "infinite");
}

}  // namespace tessera::train::loop
