#pragma once
/// Learning-rate schedules, as torch.optim.lr_scheduler's, stepped once per epoch. The lr of
/// an epoch is a pure function of the optimizer's base lr and the epoch's number (PyTorch's
/// closed forms): a schedule keeps no state, never drifts, and a resumed run needs only the
/// epochs done. TrainerOptions::lr_schedule (train/trainer.h) applies one before every epoch.
#include <memory>
#include <string>
#include <vector>

#include "tessera/export.h"

namespace tessera::optim {

class TESSERA_API LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  /// The lr of epoch `epoch` (0-based: the epochs trained before it) for an optimizer made
  /// with `base_lr`, as PyTorch's scheduler gives after `epoch` calls of step(). Error for a
  /// negative epoch, a base_lr that is negative or not finite, or an lr that is not finite
  /// (a factor above 1 grows past the largest double after enough epochs).
  double lr(double base_lr, int epoch) const;
  /// The schedule as its constructor takes it, each number written to read back exactly,
  /// e.g. "StepLR(step_size=30, gamma=0.1)": equal strings mean equal schedules.
  virtual std::string str() const = 0;

 protected:
  /// lr() after its checks.
  virtual double lr_at(double base_lr, int epoch) const = 0;
};

/// base_lr * gamma^(epoch / step_size), epoch / step_size rounded down. Error for
/// step_size < 1 or gamma not a finite number > 0.
class TESSERA_API StepLR final : public LrSchedule {
 public:
  explicit StepLR(int step_size, double gamma = 0.1);
  std::string str() const override;

 private:
  double lr_at(double base_lr, int epoch) const override;
  int step_size_;
  double gamma_;
};

/// base_lr * gamma^(milestones reached: those <= epoch). Error for milestones that are not
/// increasing numbers >= 1, or gamma not a finite number > 0. No milestones: a constant lr.
class TESSERA_API MultiStepLR final : public LrSchedule {
 public:
  explicit MultiStepLR(std::vector<int> milestones, double gamma = 0.1);
  std::string str() const override;

 private:
  double lr_at(double base_lr, int epoch) const override;
  std::vector<int> milestones_;
  double gamma_;
};

/// base_lr * gamma^epoch. Error for gamma not a finite number > 0.
class TESSERA_API ExponentialLR final : public LrSchedule {
 public:
  explicit ExponentialLR(double gamma);
  std::string str() const override;

 private:
  double lr_at(double base_lr, int epoch) const override;
  double gamma_;
};

/// eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / t_max)) / 2: from base_lr at epoch 0
/// down to eta_min at epoch t_max, and back up after it, as PyTorch's. Error for t_max < 1 or
/// eta_min not a finite number >= 0.
class TESSERA_API CosineAnnealingLR final : public LrSchedule {
 public:
  explicit CosineAnnealingLR(int t_max, double eta_min = 0);
  std::string str() const override;

 private:
  double lr_at(double base_lr, int epoch) const override;
  int t_max_;
  double eta_min_;
};

/// A linear warm-up: base_lr * (start_factor + (end_factor - start_factor) * min(epoch,
/// total_iters) / total_iters), then base_lr * end_factor. Error for start_factor outside
/// (0, 1], end_factor outside [0, 1] (PyTorch's ranges) or total_iters < 1.
class TESSERA_API LinearLR final : public LrSchedule {
 public:
  explicit LinearLR(double start_factor = 1.0 / 3, double end_factor = 1.0, int total_iters = 5);
  std::string str() const override;

 private:
  double lr_at(double base_lr, int epoch) const override;
  double start_factor_, end_factor_;
  int total_iters_;
};

/// schedules[i] from milestones[i - 1] on, counting its epochs from 0 there, as PyTorch's
/// SequentialLR: SequentialLR({warm-up, cosine}, {5}) warms up for 5 epochs, then anneals.
/// A SequentialLR inside another restarts its epochs the same way (PyTorch's, as the first
/// stage, runs one epoch ahead, and as a later one is refused).
/// Error for no schedules, a null one, milestones.size() != schedules.size() - 1, or
/// milestones that are not increasing numbers >= 1.
class TESSERA_API SequentialLR final : public LrSchedule {
 public:
  SequentialLR(std::vector<std::shared_ptr<const LrSchedule>> schedules,
               std::vector<int> milestones);
  std::string str() const override;

 private:
  double lr_at(double base_lr, int epoch) const override;
  std::vector<std::shared_ptr<const LrSchedule>> schedules_;
  std::vector<int> milestones_;
};

/// `warmup_epochs` epochs at base_lr * k / (warmup_epochs + 1), k = 1, 2, ..., then `then`
/// from its epoch 0 (a constant base_lr when null): SequentialLR of LinearLR(1 / (warmup_epochs
/// + 1), 1, warmup_epochs) and `then`. Error for warmup_epochs < 1.
TESSERA_API std::shared_ptr<const LrSchedule> with_linear_warmup(
    int warmup_epochs, std::shared_ptr<const LrSchedule> then = nullptr);

}  // namespace tessera::optim
