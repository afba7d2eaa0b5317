#pragma once
/// GradScaler: loss scaling for float16 training, as torch.amp.GradScaler, with no host wait
/// in any step. float16 cannot hold gradients below about 6e-8, so the loss is multiplied by
/// a large scale before backward() and the gradients are divided by it before the step. A
/// step whose gradients overflowed (an inf or NaN) is skipped and the scale shrinks; after
/// growth_interval clean steps it grows. Whether a step is skipped is decided on the device:
/// the fused optimizers read the scaler's found_inf there (Optimizer::step_unless), so the
/// host never learns it, and never waits for it.
///
///   GradScaler scaler;
///   for (...) {
///     opt.zero_grad();
///     Tensor loss;
///     {
///       AutocastGuard autocast(DeviceKind::kCuda, kFloat16);
///       loss = nn::cross_entropy(net(x), y);
///     }
///     scaler.scale(loss).backward();
///     scaler.unscale_(opt);                // only when clipping: the norm of true gradients
///     optim::clip_grad_norm_(net.parameters(), 1.0);
///     scaler.step(opt);                    // skipped on the device after an inf or NaN
///     scaler.update();                     // the next scale, on the device
///   }
///
/// A scaler's state (the scale, found_inf) lives on one device, that of the first loss it
/// scales: data-parallel replicas each use their own scaler, as each has its own optimizer.
#include <map>
#include <string>
#include <unordered_map>

#include "tessera/export.h"
#include "tessera/optim/optimizer.h"
#include "tessera/tensor.h"

namespace tessera::optim {

struct TESSERA_API GradScalerOptions {
  double init_scale = 65536.0;  ///< 2^16, as PyTorch; finite and > 0
  double growth_factor = 2.0;   ///< > 1: the scale's growth after growth_interval clean steps
  double backoff_factor = 0.5;  ///< in (0, 1): the scale's shrink after a step with inf/NaN
  int growth_interval = 2000;   ///< in [1, 2^24]: clean steps in a row before the scale grows
  bool enabled = true;          ///< false: scale() returns the loss and step() is plain step()
};

class TESSERA_API GradScaler {
 public:
  /// Throws Error for options outside the ranges above.
  explicit GradScaler(GradScalerOptions options = {});

  /// loss * scale, on loss's device (float32 or float64 loss). The first call puts the
  /// scaler's state on that device; a loss on another device later: DeviceMismatchError.
  Tensor scale(const Tensor& loss);
  /// Divides the grads of `optimizer`'s parameters by the scale, in place, and notes on the
  /// device whether any element was infinite or NaN: one pass per grad, no host wait. Call
  /// it before clipping or reading gradients; step() calls it when this step has not. Throws
  /// Error before any scale(), or when called twice for one optimizer between two
  /// update()s; DeviceMismatchError for a grad on another device than the scaler's state.
  void unscale_(Optimizer& optimizer);
  /// optimizer.step_unless(found_inf) after unscale_ (called here when not yet): the step
  /// is skipped on the device when any grad had an inf or NaN. Throws Error when called
  /// twice for one optimizer between two update()s.
  void step(Optimizer& optimizer);
  /// The next scale, computed on the device from every optimizer stepped since the last
  /// update: scale * backoff_factor after an inf or NaN, scale * growth_factor after
  /// growth_interval clean steps in a row, else unchanged. Throws Error when no optimizer
  /// was unscaled since the last update.
  void update();

  /// The current scale, a float32 0-dim tensor on the scaler's device (undefined before the
  /// first scale()); it changes in place at each update().
  const Tensor& scale_tensor() const { return scale_; }
  /// The current scale read on the host: a deliberate wait (allowed under SyncGuard), for
  /// logging and tests. init_scale before the first scale(); 1 when disabled.
  double get_scale() const;
  /// Whether `optimizer`'s last unscaled grads had an inf or NaN: a float32 0-dim tensor on
  /// the device (1 or 0), kept until its next unscale_; undefined before it.
  Tensor found_inf(const Optimizer& optimizer) const;
  /// {"scale", "growth_tracker"}: copies of the float32 0-dim state on the scaler's device,
  /// or, before the first scale(), the values it will start from, on the CPU. Empty when
  /// disabled. Never waits.
  std::map<std::string, Tensor> state_dict() const;
  /// Continues from `state` (as state_dict() made it). Before the first scale() the values
  /// are kept on the host and the state is made with them on the first loss's device, as
  /// always (so loading never decides a device); after it they are copied into the state
  /// explicitly. Error for a missing or unknown key, a scale that is not finite and > 0, a
  /// growth_tracker outside [0, growth_interval); ShapeError/DtypeError for a tensor that is
  /// not float32 0-dim. Reads the values on the host (a deliberate wait). Changes nothing
  /// when it throws; ignored when disabled, as PyTorch's.
  void load_state_dict(const std::map<std::string, Tensor>& state);
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

 private:
  // Per optimizer, between two update()s.
  struct PerOptimizer {
    Tensor found_inf;  // float32 0-dim on the scaler's device
    bool unscaled = false, stepped = false;
  };
  void check_started(const char* op) const;

  GradScalerOptions options_;
  Tensor scale_, growth_tracker_, inv_scale_;  // float32 0-dim, updated in place
  // What scale() starts from: init_scale and 0 unless load_state_dict came first.
  double start_scale_, start_growth_tracker_ = 0;
  std::unordered_map<const Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace tessera::optim
