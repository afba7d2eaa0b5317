// Adam and AdamW: option checks, host-side bias corrections, then the fused steps
// (ops/fused_ops.h) of every parameter with a grad.
#include "tessera/optim/adam.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/optimizer_math.h"
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

void check_non_negative(const char* op, const char* what, double value) {
  TESSERA_CHECK(std::isfinite(value) && value >= 0, Error,
                "[{}] invalid {}={}: it must be a finite number >= 0", op, what, value);
}

void check_beta(const char* op, const char* what, double value) {
  TESSERA_CHECK(value >= 0 && value < 1, Error, "[{}] invalid {}={}: it must be in [0, 1)", op,
                what, value);
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::move(params), options, /*decoupled=*/false, "Adam") {}

Adam::Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled, const char* name)
    : Optimizer(std::move(params), name),
      options_(options),
      decoupled_(decoupled),
      steps_(params_.size(), 0),
      exp_avg_(params_.size()),
      exp_avg_sq_(params_.size()) {
  check_non_negative(name, "lr", options.lr);
  check_non_negative(name, "eps", options.eps);
  check_non_negative(name, "weight_decay", options.weight_decay);
  check_beta(name, "beta1", options.beta1);
  check_beta(name, "beta2", options.beta2);
}

void Adam::set_lr(double lr) {
  check_non_negative(name_, "lr", lr);
  options_.lr = lr;
}

void Adam::set_capturable(bool on) {
  if (on == capturable_) return;
  // Moving the counts between the host and the device inside a recording would be replayed:
  // the counts made again at every replay (full(count)), or read on the host (a wait).
  for (const Tensor& p : params_) {
    TESSERA_CHECK(!detail::is_capturing(p.device()), GraphCaptureError,
                  "[{}.set_capturable] {} is capturing a graph; call set_capturable before "
                  "Graph::capture",
                  name_, p.device().str());
  }
  NoGradGuard no_grad;
  if (on) {
    device_steps_.clear();
    for (std::size_t i = 0; i < params_.size(); ++i) {
      device_steps_.push_back(
          full({}, static_cast<double>(steps_[i]), {kFloat64, params_[i].device()}));
    }
  } else {
    for (std::size_t i = 0; i < params_.size(); ++i) steps_[i] = step_count(i);
    device_steps_.clear();
  }
  capturable_ = on;
}

std::int64_t Adam::step_count(std::size_t i) const {
  if (!capturable_) return steps_.at(i);
  AllowSync deliberate;
  return static_cast<std::int64_t>(device_steps_.at(i).item<double>());
}

OptimizerState Adam::state_dict() const {
  NoGradGuard no_grad;
  OptimizerState state;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!exp_avg_[i].defined()) continue;
    const std::string prefix = std::to_string(i) + ".";
    state.emplace(prefix + "exp_avg", exp_avg_[i].clone());
    state.emplace(prefix + "exp_avg_sq", exp_avg_sq_[i].clone());
    state.emplace(prefix + "step", capturable_ ? device_steps_[i].clone()
                                               : full({}, static_cast<double>(steps_[i]),
                                                      {kFloat64, params_[i].device()}));
  }
  return state;
}

void Adam::load_state_dict(const OptimizerState& state) {
  const char* op = decoupled_ ? "AdamW.load_state_dict" : "Adam.load_state_dict";
  NoGradGuard no_grad;
  // Everything is checked before anything changes: a refused state leaves this optimizer.
  std::vector<Tensor> m(params_.size()), v(params_.size()), t(params_.size());
  for (const auto& [key, value] : state) {
    const auto [i, name] = parse_state_key(op, key, {"exp_avg", "exp_avg_sq", "step"});
    if (name == "step") {
      check_state_tensor(op, key, value, Shape{}, kFloat64);
      t[i] = value;
    } else {
      (name == "exp_avg" ? m : v)[i] = loaded_buffer(op, key, value, params_[i]);
    }
  }
  std::vector<double> counts(params_.size(), 0);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const int given = int{m[i].defined()} + int{v[i].defined()} + int{t[i].defined()};
    TESSERA_CHECK(given == 0 || given == 3, Error,
                  "[{}] parameter {}'s state is incomplete: it needs '{}.exp_avg', "
                  "'{}.exp_avg_sq' and '{}.step' together. Load a whole state_dict as "
                  "state_dict() made it",
                  op, i, i, i, i);
    if (!t[i].defined()) continue;
    AllowSync deliberate;  // loading is rare; the host needs the count when not capturable
    counts[i] = t[i].item<double>();
    // Past 2^53 a double no longer counts by ones (and inf would not convert to int64).
    TESSERA_CHECK(
        counts[i] >= 0 && counts[i] <= 9007199254740992.0 && counts[i] == std::floor(counts[i]),
        Error, "[{}] '{}.step' is {}; a step count is a whole number from 0 to 2^53", op, i,
        counts[i]);
  }
  // Explicit copies into fresh state on each parameter's device, never aliasing the caller's;
  // all made before any is kept, so running out of memory half-way leaves the old state.
  std::vector<Tensor> exp_avg(params_.size()), exp_avg_sq(params_.size()), device_steps;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (m[i].defined()) exp_avg[i] = empty_like(params_[i]).copy_(m[i]);
    if (v[i].defined()) exp_avg_sq[i] = empty_like(params_[i]).copy_(v[i]);
    if (capturable_) device_steps.push_back(full({}, counts[i], {kFloat64, params_[i].device()}));
  }
  exp_avg_ = std::move(exp_avg);
  exp_avg_sq_ = std::move(exp_avg_sq);
  if (capturable_) device_steps_ = std::move(device_steps);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    steps_[i] = static_cast<std::int64_t>(counts[i]);
  }
}

void Adam::step_unless(const Tensor& found_inf) {
  NoGradGuard no_grad;
  const AdamOptions& o = options_;
  const bool skippable = found_inf.defined();
  const char* op = decoupled_ ? (skippable ? "AdamW.step_unless" : "AdamW.step")
                              : (skippable ? "Adam.step_unless" : "Adam.step");
  if (skippable) check_found_inf(op, found_inf);
  // Note [A step refused before any update]: every parameter's checks, then the updates.
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor g = params_[i].grad();
    if (!g.defined()) continue;
    const Tensor& param = params_[i];
    // A host count recorded into a graph would be replayed: every replay would correct its
    // bias as for this one step.
    TESSERA_CHECK(capturable_ || !detail::is_capturing(param.device()), GraphCaptureError,
                  "[{}] {} is capturing a graph, and this optimizer keeps its step counts on "
                  "the host: every replay would repeat step {}. Call set_capturable(true) "
                  "before capturing",
                  op, param.device().str(), steps_[i] + 1);
    if (!exp_avg_[i].defined() || !exp_avg_sq_[i].defined()) check_state_outside_capture(op, i);
    detail::check_adam_step({op, i}, param, g, exp_avg_[i], exp_avg_sq_[i],
                            {found_inf, Tensor(), Tensor()});
  }
  // Host counts in a recording: refused below, before the counts move to the device.
  if (skippable && !capturable_ &&
      !std::any_of(params_.begin(), params_.end(),
                   [](const Tensor& p) { return detail::is_capturing(p.device()); })) {
    set_capturable(true);  // a skip must not count
  }
  // What each step count grows by: 1, or 0 when found_inf skips this step. Any nonzero
  // found_inf skips: 1 - found_inf counted a flag of 0.5 as half a step, and one of 2 as -1
  // (the next step then corrected for t = 0, 1 - beta1^0 = 0, and wrote NaN).
  const Tensor applied = skippable ? eq(found_inf, 0.0).to(kFloat64) : Tensor();
  // Every parameter's step, queued together (one kernel for the lot where the backend can).
  std::vector<std::size_t> indices;
  std::vector<detail::AdamStep> steps;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor g = params_[i].grad();
    if (!g.defined()) continue;
    const Tensor& param = params_[i];
    if (!exp_avg_[i].defined() || !exp_avg_sq_[i].defined()) {
      // Both made before either is kept: out of memory between them left exp_avg alone,
      // and every later step refused the missing exp_avg_sq.
      Tensor m = zeros_like(param), v = zeros_like(param);
      exp_avg_[i] = std::move(m);
      exp_avg_sq_[i] = std::move(v);
    }
    // A model moved after set_capturable takes its counts along (a one-time copy).
    if (capturable_ && device_steps_[i].device() != param.device()) {
      device_steps_[i] = device_steps_[i].to(param.device());
    }
    detail::AdamParams p{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, decoupled_};
    // A capturable step's kernel corrects with the count it reads on the device.
    detail::set_adam_step(p, static_cast<double>(capturable_ ? 1 : steps_[i] + 1));
    indices.push_back(i);
    steps.push_back({param,
                     g,
                     exp_avg_[i],
                     exp_avg_sq_[i],
                     {found_inf, capturable_ ? device_steps_[i] : Tensor(), Tensor()},
                     p});
  }
  // The device counts grow before the kernels read them. A step that was not queued is not
  // counted (its bias correction would be off by one afterwards); one that was, is, also when
  // a later one fails.
  std::vector<char> queued(steps.size(), 0);
  std::size_t counted = 0;
  try {
    if (capturable_) {
      for (; counted < steps.size(); ++counted) {
        Tensor& count = device_steps_[indices[counted]];
        if (skippable) {
          count.add_(applied);
        } else {
          count.add_(1.0);
        }
      }
    }
    detail::adam_steps(op, indices, steps, queued);
  } catch (...) {
    NoGradGuard undo;
    for (std::size_t k = 0; k < counted; ++k) {
      if (queued[k] != 0) continue;
      Tensor& count = device_steps_[indices[k]];
      if (skippable) {
        count.sub_(applied);
      } else {
        count.sub_(1.0);
      }
    }
    if (!capturable_) {
      for (std::size_t k = 0; k < steps.size(); ++k) {
        if (queued[k] != 0) ++steps_[indices[k]];
      }
    }
    throw;
  }
  if (!capturable_) {
    for (const std::size_t i : indices) ++steps_[i];
  }
}

std::string Adam::str() const {
  const AdamOptions& o = options_;
  return fmt::format("{}(lr={}, betas=({}, {}), eps={}, weight_decay={})", name_, o.lr, o.beta1,
                     o.beta2, o.eps, o.weight_decay);
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions o)
    : Adam(std::move(params), AdamOptions{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay},
           /*decoupled=*/true, "AdamW") {}

}  // namespace tessera::optim
