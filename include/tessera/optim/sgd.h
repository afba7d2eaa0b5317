#pragma once
/// Stochastic gradient descent with momentum, dampening, weight decay and Nesterov momentum,
/// exactly as torch.optim.SGD.
#include <vector>

#include "tessera/export.h"
#include "tessera/optim/optimizer.h"

namespace tessera::optim {

struct TESSERA_API SgdOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

class TESSERA_API SGD final : public Optimizer {
 public:
  /// Throws Error for lr, momentum, dampening or weight_decay below 0, or nesterov without
  /// momentum > 0 and dampening 0; see Optimizer for the checks on `params`.
  /// Per parameter with grad g: d = g + weight_decay * p; with momentum, buf = d at the
  /// first step, else buf = momentum * buf + (1 - dampening) * d, and d = buf (or
  /// d + momentum * buf with nesterov); then p -= lr * d.
  SGD(std::vector<Tensor> params, SgdOptions options = {});

  /// Updates every parameter with a grad (one task per CPU device, one fused kernel per 16
  /// parameters on a GPU); never waits.
  void step() override { step_unless(Tensor()); }
  /// With a found_inf, a momentum buffer that no step has written yet keeps a flag on the
  /// device until one does (one tiny op per such parameter and step), so that a skipped
  /// first step leaves the next one the first.
  void step_unless(const Tensor& found_inf) override;
  double lr() const override { return options_.lr; }
  void set_lr(double lr) override;
  const SgdOptions& options() const { return options_; }
  std::string str() const override;
  /// Per parameter a step reached: "<i>.momentum_buffer" (the parameter's shape and dtype),
  /// and "<i>.momentum_unwritten" (float32 0-dim) while a scaled step may have skipped its
  /// first update. Empty without momentum. See Optimizer::state_dict.
  OptimizerState state_dict() const override;
  void load_state_dict(const OptimizerState& state) override;

 private:
  SgdOptions options_;
  std::vector<Tensor> momentum_;  // per parameter; undefined until its first step
  // Per parameter, while scaled steps may have skipped its first step: float32 0-dim on
  // its device, nonzero until a step writes the momentum buffer.
  std::vector<Tensor> unwritten_;
};

}  // namespace tessera::optim
