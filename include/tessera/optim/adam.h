#pragma once
/// Adam and AdamW (decoupled weight decay), exactly as torch.optim.Adam / AdamW without
/// amsgrad: bias-corrected first and second moments, per-parameter step counts.
#include <cstdint>
#include <vector>

#include "tessera/export.h"
#include "tessera/optim/optimizer.h"

namespace tessera::optim {

struct TESSERA_API AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  ///< Adam: added to the gradient (L2 penalty).
};

struct TESSERA_API AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;  ///< AdamW: p *= 1 - lr * weight_decay before the update.
};

class TESSERA_API Adam : public Optimizer {
 public:
  /// Throws Error for lr, eps or weight_decay below 0 and betas outside [0, 1); see
  /// Optimizer for the checks on `params`.
  Adam(std::vector<Tensor> params, AdamOptions options = {});

  /// Updates every parameter with a grad, as SGD::step (its moments are zero-filled on its first
  /// step); bias corrections are host scalars, or, when capturable, computed by the kernel
  /// from a step count on the device. Never waits.
  void step() override { step_unless(Tensor()); }
  /// With a found_inf, the step counts move to the device for good (as set_capturable(true)),
  /// where a skipped step does not count.
  void step_unless(const Tensor& found_inf) override;
  void set_capturable(bool on) override;
  double lr() const override { return options_.lr; }
  void set_lr(double lr) override;
  const AdamOptions& options() const { return options_; }
  std::string str() const override;
  /// How many steps updated parameter i (0 before its first grad); when capturable, read
  /// from the device (a deliberate host wait), so replayed steps count.
  std::int64_t step_count(std::size_t i) const;
  /// Per parameter a step reached: "<i>.exp_avg", "<i>.exp_avg_sq" (the parameter's shape
  /// and dtype) and "<i>.step" (float64 0-dim, on the parameter's device whether or not
  /// capturable). See Optimizer::state_dict; never waits.
  OptimizerState state_dict() const override;
  /// See Optimizer::load_state_dict. When not capturable the step counts are read on the
  /// host (a deliberate wait); Error for a count that is not a whole number >= 0.
  void load_state_dict(const OptimizerState& state) override;

 protected:
  Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled, const char* name);

 private:
  AdamOptions options_;
  bool decoupled_;
  std::vector<std::int64_t> steps_;           // while not capturable
  std::vector<Tensor> device_steps_;          // while capturable: float64 0-dim, beside each param
  std::vector<Tensor> exp_avg_, exp_avg_sq_;  // m and v per parameter
};

class TESSERA_API AdamW final : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
};

}  // namespace tessera::optim
