// Front end of the fused optimizer steps and of gradient unscaling: the device rule, the
// shapes and dtypes of the gradient and the state, then one backend call for the parameters of
// each device and dtype.
#include <fmt/format.h>

#include <span>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/device_rules.h"
#include "core/tensor_impl.h"
#include "ops/fused_ops.h"
#include "ops/half_compute.h"
#include "tessera/autograd.h"

namespace tessera::detail {
namespace {

using StateList = std::initializer_list<std::pair<const char*, const Tensor*>>;

// The one device rule for param, grad and state, with names formatted only for the error.
void check_one_device(const ParamSite& site, const Tensor& param, const Tensor& grad,
                      StateList state) {
  bool one = grad.device() == param.device();
  for (const auto& [what, t] : state) one = one && t->device() == param.device();
  if (one) return;
  const std::string p_name = fmt::format("parameter {}", site.index);
  const std::string g_name = fmt::format("parameter {}'s grad", site.index);
  std::vector<std::string> names;
  for (const auto& [what, t] : state)
    names.push_back(fmt::format("parameter {}'s {}", site.index, what));
  switch (state.size()) {
    case 0:
      common_device(site.op, {{p_name.c_str(), &param}, {g_name.c_str(), &grad}});
      break;
    case 1:
      common_device(site.op, {{p_name.c_str(), &param},
                              {g_name.c_str(), &grad},
                              {names[0].c_str(), state.begin()->second}});
      break;
    default:
      common_device(site.op, {{p_name.c_str(), &param},
                              {g_name.c_str(), &grad},
                              {names[0].c_str(), state.begin()->second},
                              {names[1].c_str(), (state.begin() + 1)->second}});
      break;
  }
}

// Checks param, grad and the state tensors of one step; launches nothing.
void check_operands(const ParamSite& site, const Tensor& param, const Tensor& grad,
                    StateList state) {
  // State left on the device of the first step by a model moved since: the user cannot move
  // exp_avg itself, so common_device's fix (".to()") would not help.
  for (const auto& [what, t] : state) {
    TESSERA_CHECK(!param.defined() || !t->defined() || t->device() == param.device(),
                  DeviceMismatchError,
                  "[{}] parameter {} is on {} but its optimizer state ({}) is on {}, where its "
                  "first step made it. Build the optimizer after moving the model, or move its "
                  "state along with optimizer.load_state_dict(optimizer.state_dict())",
                  site.op, site.index, param.device().str(), what, t->device().str());
  }
  check_one_device(site, param, grad, state);  // parameter, grad and state on one device
  TESSERA_CHECK(grad.shape() == param.shape(), ShapeError,
                "[{}] parameter {} has shape {} but its grad has shape {}", site.op, site.index,
                param.shape().str(), grad.shape().str());
  TESSERA_CHECK(param.is_contiguous(), Error,
                "[{}] parameter {} is not contiguous (a transposed or sliced view); optimize a "
                "contiguous tensor, e.g. x.contiguous().detach().requires_grad_(), or, for a "
                "layer's parameter given a view (layer.weight = w.t()), give it w.t().contiguous()",
                site.op, site.index);
  for (const auto& [what, t] : state) {
    TESSERA_CHECK(t->dtype() == param.dtype() && t->shape() == param.shape(), Error,
                  "[{}] parameter {} is now {} {} but its optimizer state is {} {}; create the "
                  "optimizer after converting the model",
                  site.op, site.index, dtype_name(param.dtype()), param.shape().str(),
                  dtype_name(t->dtype()), t->shape().str());
  }
}

// check_operands, then the gradient as the kernel wants it (param's dtype, contiguous).
// Marks param and the state written.
Tensor checked_grad(const ParamSite& site, const Tensor& param, const Tensor& grad,
                    StateList state) {
  check_operands(site, param, grad, state);
  NoGradGuard no_grad;
  const Tensor g = (grad.dtype() == param.dtype() ? grad : grad.to(param.dtype())).contiguous();
  mark_written(param);
  for (const auto& [what, t] : state) mark_written(*t);
  return g;
}

// Checks that the step's device-side values live on param's device.
void check_device_state(const ParamSite& site, const Tensor& param, const DeviceStepState& d) {
  for (const auto& [what, t] : {std::pair<const char*, const Tensor*>{"found_inf", &d.found_inf},
                                {"step count", &d.step},
                                {"first-step flag", &d.first_step}}) {
    TESSERA_CHECK(!t->defined() || t->device() == param.device(), DeviceMismatchError,
                  "[{}] parameter {} is on {} but the step's {} is on {}. An optimizer and "
                  "its gradient scaler work on one device: use one GradScaler per device",
                  site.op, site.index, param.device().str(), what, t->device().str());
  }
}

// Queues each group of the steps not queued yet that share a device and dtype, with one call
// queue(group) each: groups in the order of their first parameter, a group's steps in
// parameter order. A group's steps are marked in `queued` once its call has returned, so a
// caller that catches a failure knows which steps were queued.
template <typename Step, typename Queue>
void queue_groups(const std::vector<Step>& steps, std::span<char> queued, Queue queue) {
  std::vector<Step> group;
  std::vector<std::size_t> members;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (queued[i] != 0) continue;
    const Device device = steps[i].param.device();
    const Dtype dtype = steps[i].param.dtype();
    group.clear();
    members.clear();
    for (std::size_t j = i; j < steps.size(); ++j) {
      if (queued[j] == 0 && steps[j].param.device() == device && steps[j].param.dtype() == dtype) {
        group.push_back(steps[j]);
        members.push_back(j);
      }
    }
    queue(std::span<const Step>(group));
    for (const std::size_t j : members) queued[j] = 1;
  }
}

}  // namespace

void check_sgd_step(const ParamSite& site, const Tensor& param, const Tensor& grad,
                    const Tensor& momentum_buf, const DeviceStepState& device) {
  if (momentum_buf.defined()) {
    check_operands(site, param, grad, {{"momentum buffer", &momentum_buf}});
  } else {
    check_operands(site, param, grad, {});
  }
  check_device_state(site, param, device);
}

void check_adam_step(const ParamSite& site, const Tensor& param, const Tensor& grad,
                     const Tensor& exp_avg, const Tensor& exp_avg_sq,
                     const DeviceStepState& device) {
  if (exp_avg.defined() && exp_avg_sq.defined()) {
    check_operands(site, param, grad, {{"exp_avg", &exp_avg}, {"exp_avg_sq", &exp_avg_sq}});
  } else {
    check_operands(site, param, grad, {});
  }
  check_device_state(site, param, device);
}

// Half parameters step one at a time, each through float32 copies of itself and its state
// that are rounded back once (Note [Half precision]): only one parameter's copies are alive
// at a time, as before the steps were queued together.
void sgd_steps(const char* op, std::span<const std::size_t> indices, std::span<const SgdStep> steps,
               const SgdParams& p, std::span<char> queued) {
  std::vector<SgdStep> ready(steps.begin(), steps.end());
  for (std::size_t k = 0; k < ready.size(); ++k) {
    SgdStep& s = ready[k];
    const ParamSite site{op, indices[k]};
    s.grad = s.momentum_buf.defined()
                 ? checked_grad(site, s.param, s.grad, {{"momentum buffer", &s.momentum_buf}})
                 : checked_grad(site, s.param, s.grad, {});
    check_device_state(site, s.param, s.device);
  }
  for (std::size_t k = 0; k < ready.size(); ++k) {
    const SgdStep& s = ready[k];
    if (!is_half(s.param.dtype())) [[likely]] {
      continue;
    }
    NoGradGuard no_grad;
    SgdStep wide = s;
    wide.param = to_float32(s.param);
    wide.grad = to_float32(s.grad);
    if (s.momentum_buf.defined()) wide.momentum_buf = to_float32(s.momentum_buf);
    backend_of(s.param.device()).sgd_steps(std::span(&wide, 1), p);
    store_converted(wide.param, s.param);
    if (s.momentum_buf.defined()) store_converted(wide.momentum_buf, s.momentum_buf);
    queued[k] = 1;
  }
  queue_groups(ready, queued, [&](std::span<const SgdStep> group) {
    backend_of(group.front().param.device()).sgd_steps(group, p);
  });
}

void adam_steps(const char* op, std::span<const std::size_t> indices,
                std::span<const AdamStep> steps, std::span<char> queued) {
  std::vector<AdamStep> ready(steps.begin(), steps.end());
  for (std::size_t k = 0; k < ready.size(); ++k) {
    AdamStep& s = ready[k];
    const ParamSite site{op, indices[k]};
    s.grad = checked_grad(site, s.param, s.grad,
                          {{"exp_avg", &s.exp_avg}, {"exp_avg_sq", &s.exp_avg_sq}});
    check_device_state(site, s.param, s.device);
  }
  for (std::size_t k = 0; k < ready.size(); ++k) {  // half ones as in sgd_steps
    const AdamStep& s = ready[k];
    if (!is_half(s.param.dtype())) [[likely]] {
      continue;
    }
    NoGradGuard no_grad;
    AdamStep wide = s;
    wide.param = to_float32(s.param);
    wide.grad = to_float32(s.grad);
    wide.exp_avg = to_float32(s.exp_avg);
    wide.exp_avg_sq = to_float32(s.exp_avg_sq);
    backend_of(s.param.device()).adam_steps(std::span(&wide, 1));
    store_converted(wide.param, s.param);
    store_converted(wide.exp_avg, s.exp_avg);
    store_converted(wide.exp_avg_sq, s.exp_avg_sq);
    queued[k] = 1;
  }
  queue_groups(ready, queued, [](std::span<const AdamStep> group) {
    backend_of(group.front().param.device()).adam_steps(group);
  });
}

void unscale_grad(const ParamSite& site, const Tensor& grad, const Tensor& inv_scale,
                  const Tensor& found_inf) {
  const std::string g_name = fmt::format("parameter {}'s grad", site.index);
  common_device(site.op,
                {{g_name.c_str(), &grad}, {"the scale", &inv_scale}, {"found_inf", &found_inf}});
  TESSERA_CHECK(is_floating(grad.dtype()), DtypeError,
                "[{}] parameter {}'s grad is {}; only floating gradients can be unscaled", site.op,
                site.index, dtype_name(grad.dtype()));
  NoGradGuard no_grad;
  // The kernel works on contiguous float32/float64 memory; anything else is unscaled in a
  // working copy that is written back (half grads through float32, Note [Half precision]).
  const Tensor work = (is_half(grad.dtype()) ? to_float32(grad) : grad).contiguous();
  mark_written(grad);
  backend_of(grad.device()).unscale_grad(work, inv_scale, found_inf);
  if (!work.is_same(grad)) store_converted(work, grad);
}

}  // namespace tessera::detail
