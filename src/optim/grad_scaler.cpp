// GradScaler: every value that changes from step to step (the scale, the count of clean
// steps, found_inf) is a 0-dim tensor on the device, written in place, so a step never
// reads one on the host and a step recorded in a graph replays with the current values.
#include "tessera/optim/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "core/device_rules.h"
#include "ops/fused_ops.h"
#include "tessera/autograd.h"
#include "tessera/factories.h"
#include "tessera/graph.h"
#include "tessera/ops.h"
#include "tessera/sync_guard.h"

namespace tessera::optim {
namespace {

constexpr int kMaxGrowthInterval = 1 << 24;  // counted exactly in a float32

}  // namespace

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options), start_scale_(options.init_scale) {
  TESSERA_CHECK(std::isfinite(options.init_scale) && options.init_scale > 0, Error,
                "[GradScaler] invalid init_scale={}: it must be a finite number > 0",
                options.init_scale);
  TESSERA_CHECK(std::isfinite(options.growth_factor) && options.growth_factor > 1, Error,
                "[GradScaler] invalid growth_factor={}: it must be a finite number > 1",
                options.growth_factor);
  TESSERA_CHECK(options.backoff_factor > 0 && options.backoff_factor < 1, Error,
                "[GradScaler] invalid backoff_factor={}: it must be in (0, 1)",
                options.backoff_factor);
  TESSERA_CHECK(options.growth_interval >= 1 && options.growth_interval <= kMaxGrowthInterval,
                Error, "[GradScaler] invalid growth_interval={}: it must be in [1, {}]",
                options.growth_interval, kMaxGrowthInterval);
}

void GradScaler::check_started(const char* op) const {
  TESSERA_CHECK(scale_.defined(), Error,
                "[GradScaler.{}] no loss was scaled yet: call scaler.scale(loss).backward() "
                "first, so that the gradients carry the scale",
                op);
}

Tensor GradScaler::scale(const Tensor& loss) {
  TESSERA_CHECK(loss.defined(), Error, "[GradScaler.scale] the loss is an undefined tensor");
  if (!options_.enabled) return loss;
  TESSERA_CHECK(loss.dtype() == kFloat32 || loss.dtype() == kFloat64, DtypeError,
                "[GradScaler.scale] the loss is {}; scale a float32 or float64 loss "
                "(scaler.scale(loss.to(kFloat32)); autocast computes losses in float32)",
                dtype_name(loss.dtype()));
  if (!scale_.defined()) {
    // A replay would make the first scale again, resetting its growth and backoff.
    TESSERA_CHECK(!detail::is_capturing(loss.device()), GraphCaptureError,
                  "[GradScaler.scale] this scaler has not scaled a loss yet, and {} is "
                  "capturing a graph: the scale its first use makes would be made again by "
                  "every replay, resetting it. Take one step before Graph::capture (as Trainer "
                  "does)",
                  loss.device().str());
    NoGradGuard no_grad;
    const TensorOptions on_device{kFloat32, loss.device()};
    scale_ = full({}, start_scale_, on_device);
    growth_tracker_ = full({}, start_growth_tracker_, on_device);
    inv_scale_ = zeros({}, on_device);
  }
  TESSERA_CHECK(loss.device() == scale_.device(), DeviceMismatchError,
                "[GradScaler.scale] the loss is on {} but this scaler's state is on {}, where "
                "it scaled its first loss. Use one GradScaler per device (each data-parallel "
                "replica has its own optimizer and scaler)",
                loss.device().str(), scale_.device().str());
  return mul(loss, loss.dtype() == kFloat32 ? scale_ : scale_.to(kFloat64));
}

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!options_.enabled) return;
  check_started("unscale_");
  PerOptimizer& state = per_optimizer_[&optimizer];
  // Stepped first: step() unscales too, so after it `unscaled` is always set.
  TESSERA_CHECK(!state.stepped, Error,
                "[GradScaler.unscale_] this optimizer already stepped in this step; call "
                "unscale_ before step(), and update() before the next step");
  TESSERA_CHECK(!state.unscaled, Error,
                "[GradScaler.unscale_] this optimizer's gradients were already unscaled in this "
                "step; call unscale_ once per optimizer between two update()s");
  const std::vector<Tensor>& params = optimizer.params();
  // Every grad is checked before any is unscaled: a refusal halfway left the first ones
  // unscaled, and a second try divided them again.
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor g = params[i].grad();
    TESSERA_CHECK(!g.defined() || g.device() == scale_.device(), DeviceMismatchError,
                  "[GradScaler.unscale_] parameter {}'s grad is on {} but this scaler's state is "
                  "on {}. An optimizer's parameters and its scaler share one device: use one "
                  "GradScaler per device",
                  i, g.device().str(), scale_.device().str());
  }
  NoGradGuard no_grad;
  if (state.found_inf.defined()) {
    state.found_inf.zero_();
  } else {
    state.found_inf = zeros({}, {kFloat32, scale_.device()});
  }
  inv_scale_.copy_(div(1.0, scale_));
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor g = params[i].grad();
    if (!g.defined()) continue;
    detail::unscale_grad({"GradScaler.unscale_", i}, g, inv_scale_, state.found_inf);
  }
  state.unscaled = true;
}

void GradScaler::step(Optimizer& optimizer) {
  if (!options_.enabled) return optimizer.step();
  check_started("step");
  {
    const auto it = per_optimizer_.find(&optimizer);
    TESSERA_CHECK(it == per_optimizer_.end() || !it->second.stepped, Error,
                  "[GradScaler.step] this optimizer already stepped since the last update(); "
                  "call scaler.update() after each step");
  }
  // With no gradient nothing is checked for inf/NaN, and update() would count a clean step
  // (and grow the scale) for a step that did nothing; torch's scaler refuses it too.
  const std::vector<Tensor>& params = optimizer.params();
  TESSERA_CHECK(
      std::any_of(params.begin(), params.end(), [](const Tensor& p) { return p.grad().defined(); }),
      Error,
      "[GradScaler.step] none of this optimizer's {} parameter(s) has a gradient, so "
      "no inf/NaN check was made and update() would count a clean step; run "
      "scaler.scale(loss).backward() before step() (zero_grad() belongs before the "
      "backward pass)",
      params.size());
  PerOptimizer& state = per_optimizer_[&optimizer];
  if (!state.unscaled) unscale_(optimizer);
  optimizer.step_unless(state.found_inf);
  state.stepped = true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  check_started("update");
  NoGradGuard no_grad;
  Tensor found;  // 1 when any optimizer unscaled since the last update saw an inf or NaN
  for (auto& [opt, state] : per_optimizer_) {
    if (!state.unscaled) continue;
    found = found.defined() ? maximum(found, state.found_inf) : state.found_inf;
    state.unscaled = state.stepped = false;
  }
  TESSERA_CHECK(found.defined(), Error,
                "[GradScaler.update] no optimizer's gradients were unscaled since the last "
                "update; call scaler.step(optimizer) (or unscale_) before update()");
  // On the device, as torch's _amp_update_scale_: a skip backs off and restarts the count;
  // growth_interval clean steps in a row grow the scale and restart it, unless the grown
  // scale would not be a finite float32: an infinite scale makes every scaled loss inf,
  // every later step would be skipped and backing off (inf * 0.5) never ends it.
  const Tensor overflow = gt(found, 0.0);
  const Tensor clean_steps = add(growth_tracker_, 1.0);
  const Tensor grow = ge(clean_steps, static_cast<double>(options_.growth_interval));
  // The factors multiply in float64 and the product is rounded once, as torch's: a float32
  // product rounds the factor (1.1, 0.3) first and drifts by an ulp per update.
  const Tensor scale64 = scale_.to(kFloat64);
  const Tensor grown = mul(scale64, options_.growth_factor);
  const Tensor grown_if_finite =
      where(le(grown, static_cast<double>(std::numeric_limits<float>::max())), grown.to(kFloat32),
            scale_);
  const Tensor next_scale = where(overflow, mul(scale64, options_.backoff_factor).to(kFloat32),
                                  where(grow, grown_if_finite, scale_));
  const Tensor next_tracker = where(overflow, 0.0, where(grow, 0.0, clean_steps));
  scale_.copy_(next_scale);
  growth_tracker_.copy_(next_tracker);
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  if (!scale_.defined()) return start_scale_;
  AllowSync deliberate;
  return scale_.item<double>();
}

std::map<std::string, Tensor> GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  NoGradGuard no_grad;
  if (!scale_.defined()) {
    return {{"scale", full({}, start_scale_, {kFloat32, cpu()})},
            {"growth_tracker", full({}, start_growth_tracker_, {kFloat32, cpu()})}};
  }
  return {{"scale", scale_.clone()}, {"growth_tracker", growth_tracker_.clone()}};
}

void GradScaler::load_state_dict(const std::map<std::string, Tensor>& state) {
  constexpr const char* kOp = "GradScaler.load_state_dict";
  if (!options_.enabled) return;
  for (const auto& [key, t] : state) {
    TESSERA_CHECK(key == "scale" || key == "growth_tracker", Error,
                  "[{}] unknown key '{}': a GradScaler's state is 'scale' and 'growth_tracker'",
                  kOp, key);
    TESSERA_CHECK(t.defined(), Error, "[{}] '{}' is an undefined tensor", kOp, key);
    TESSERA_CHECK(t.dim() == 0, ShapeError, "[{}] '{}' has shape {}; it must be 0-dim", kOp, key,
                  t.shape().str());
    TESSERA_CHECK(t.dtype() == kFloat32, DtypeError, "[{}] '{}' is {}; it must be float32", kOp,
                  key, dtype_name(t.dtype()));
  }
  for (const char* key : {"scale", "growth_tracker"}) {
    TESSERA_CHECK(state.contains(key), Error,
                  "[{}] missing key '{}'; load a whole state_dict as GradScaler.state_dict() "
                  "made it",
                  kOp, key);
  }
  double scale = 0, tracker = 0;
  {
    AllowSync deliberate;  // loading is rare; the values are checked on the host
    scale = state.at("scale").item<double>();
    tracker = state.at("growth_tracker").item<double>();
  }
  TESSERA_CHECK(std::isfinite(scale) && scale > 0, Error,
                "[{}] 'scale' is {}; it must be a finite number > 0", kOp, scale);
  TESSERA_CHECK(
      tracker >= 0 && tracker < options_.growth_interval && tracker == std::floor(tracker), Error,
      "[{}] 'growth_tracker' is {}; it must be a whole number in [0, {}) (this "
      "scaler's growth_interval). Build the scaler with the growth_interval it was "
      "saved with",
      kOp, tracker, options_.growth_interval);
  start_scale_ = scale;
  start_growth_tracker_ = tracker;
  if (scale_.defined()) {
    NoGradGuard no_grad;
    scale_.fill_(scale);
    growth_tracker_.fill_(tracker);
  }
}

Tensor GradScaler::found_inf(const Optimizer& optimizer) const {
  const auto it = per_optimizer_.find(&optimizer);
  return it == per_optimizer_.end() ? Tensor() : it->second.found_inf;
}

}  // namespace tessera::optim
