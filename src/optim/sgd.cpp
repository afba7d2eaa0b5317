// SGD: option checks, then the fused steps (ops/fused_ops.h) of every parameter with a grad.
#include "tessera/optim/sgd.h"

#include <cmath>
#include <vector>

#include "core/check.h"
#include "ops/fused_ops.h"
#include "tessera/autograd.h"
#include "tessera/factories.h"

namespace tessera::optim {
namespace {

void check_non_negative(const char* what, double value) {
  TESSERA_CHECK(std::isfinite(value) && value >= 0, Error,
                "[SGD] invalid {}={}: it must be a finite number >= 0", what, value);
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, SgdOptions options)
    : Optimizer(std::move(params), "SGD"),
      options_(options),
      momentum_(params_.size()),
      unwritten_(params_.size()) {
  check_non_negative("lr", options.lr);
  check_non_negative("momentum", options.momentum);
  check_non_negative("dampening", options.dampening);
  check_non_negative("weight_decay", options.weight_decay);
  TESSERA_CHECK(!options.nesterov || (options.momentum > 0 && options.dampening == 0), Error,
                "[SGD] nesterov=true needs momentum > 0 and dampening = 0, got momentum={} and "
                "dampening={}",
                options.momentum, options.dampening);
}

void SGD::set_lr(double lr) {
  check_non_negative("lr", lr);
  options_.lr = lr;
}

std::string SGD::str() const {
  const SgdOptions& o = options_;
  return fmt::format("SGD(lr={}, momentum={}, dampening={}, weight_decay={}, nesterov={})", o.lr,
                     o.momentum, o.dampening, o.weight_decay, o.nesterov);
}

OptimizerState SGD::state_dict() const {
  NoGradGuard no_grad;
  OptimizerState state;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!momentum_[i].defined()) continue;
    state.emplace(std::to_string(i) + ".momentum_buffer", momentum_[i].clone());
    if (unwritten_[i].defined()) {
      state.emplace(std::to_string(i) + ".momentum_unwritten", unwritten_[i].clone());
    }
  }
  return state;
}

void SGD::load_state_dict(const OptimizerState& state) {
  constexpr const char* kOp = "SGD.load_state_dict";
  NoGradGuard no_grad;
  // Everything is checked before anything changes: a refused state leaves this optimizer.
  std::vector<Tensor> buffers(params_.size()), unwritten(params_.size());
  for (const auto& [key, t] : state) {
    const auto [i, name] = parse_state_key(kOp, key, {"momentum_buffer", "momentum_unwritten"});
    if (name == "momentum_buffer") {
      buffers[i] = loaded_buffer(kOp, key, t, params_[i]);
    } else {
      check_state_tensor(kOp, key, t, Shape{}, kFloat32);
      unwritten[i] = t;
    }
  }
  for (std::size_t i = 0; i < params_.size(); ++i) {
    TESSERA_CHECK(!unwritten[i].defined() || buffers[i].defined(), Error,
                  "[{}] '{}.momentum_unwritten' without '{}.momentum_buffer': the state is "
                  "incomplete. Load a whole state_dict as SGD.state_dict() made it",
                  kOp, i, i);
    TESSERA_CHECK(!buffers[i].defined() || options_.momentum != 0, Error,
                  "[{}] '{}.momentum_buffer' given to an SGD with momentum=0, which keeps no "
                  "buffers. Build the SGD with the momentum it was saved with",
                  kOp, i);
  }
  // Explicit copies into fresh state on each parameter's device (Tensor::copy_ copies across
  // devices when asked to), so the caller's tensors are never aliased; all made before any
  // is kept, so running out of memory half-way leaves the old state whole.
  std::vector<Tensor> momentum(params_.size()), unwritten_now(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (buffers[i].defined()) momentum[i] = empty_like(params_[i]).copy_(buffers[i]);
    if (unwritten[i].defined()) {
      unwritten_now[i] = empty({}, {kFloat32, params_[i].device()}).copy_(unwritten[i]);
    }
  }
  momentum_ = std::move(momentum);
  unwritten_ = std::move(unwritten_now);
}

void SGD::step_unless(const Tensor& found_inf) {
  NoGradGuard no_grad;
  const detail::SgdParams p{options_.lr, options_.momentum, options_.dampening,
                            options_.weight_decay, options_.nesterov};
  const bool skippable = found_inf.defined();
  const char* op = skippable ? "SGD.step_unless" : "SGD.step";
  if (skippable) check_found_inf(op, found_inf);
  // Note [A step refused before any update]: every parameter's checks, then the updates.
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor g = params_[i].grad();
    if (!g.defined()) continue;
    if (options_.momentum != 0 && !momentum_[i].defined()) check_state_outside_capture(op, i);
    detail::check_sgd_step({op, i}, params_[i], g, momentum_[i],
                           {found_inf, Tensor(), unwritten_[i]});
  }
  // Every parameter's step, queued together (one kernel for the lot where the backend can).
  std::vector<std::size_t> indices;
  std::vector<detail::SgdStep> steps;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor g = params_[i].grad();
    if (!g.defined()) continue;
    const Tensor& param = params_[i];
    detail::SgdStep step{param, g, momentum_[i], {found_inf, Tensor(), unwritten_[i]}, false};
    // A new buffer is kept only once the step that fills it was accepted: an uninitialized
    // one kept after a refused first step (out of memory) was read as a momentum next step.
    if (options_.momentum != 0 && !step.momentum_buf.defined()) {
      if (skippable) {
        // Whether this step is the first to write the buffer is known on the device only.
        step.momentum_buf = zeros_like(param);
        step.device.first_step = ones({}, {kFloat32, param.device()});
      } else {
        // Uninitialized: the kernel writes the first buffer (= the gradient) itself.
        step.momentum_buf = empty_like(param);
        step.first_step = true;
      }
    }
    indices.push_back(i);
    steps.push_back(std::move(step));
  }
  // The state of each queued step is kept, also when a later one fails.
  std::vector<char> queued(steps.size(), 0);
  const auto keep_state = [&] {
    for (std::size_t k = 0; k < steps.size(); ++k) {
      if (queued[k] == 0) continue;
      const std::size_t i = indices[k];
      momentum_[i] = steps[k].momentum_buf;
      Tensor unwritten = steps[k].device.first_step;
      if (unwritten.defined()) {
        if (skippable) {
          unwritten.mul_(found_inf);  // still unwritten only if this step was skipped
        } else {
          unwritten = Tensor();  // this step wrote it
        }
      }
      unwritten_[i] = unwritten;
    }
  };
  try {
    detail::sgd_steps(op, indices, steps, p, queued);
  } catch (...) {
    keep_state();
    throw;
  }
  keep_state();
}

}  // namespace tessera::optim
