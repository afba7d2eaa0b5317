// Front end of the fused optimizer steps and of gradient unscaling: the device rule, the
// shapes and dtypes of the gradient and the state, then one backend kernel per parameter.
#include <fmt/format.h>

#include <string>

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

void sgd_step(const ParamSite& site, const Tensor& param, const Tensor& grad,
              const Tensor& momentum_buf, const DeviceStepState& device, const SgdParams& p) {
  const Tensor g = momentum_buf.defined()
                       ? checked_grad(site, param, grad, {{"momentum buffer", &momentum_buf}})
                       : checked_grad(site, param, grad, {});
  check_device_state(site, param, device);
  if (is_half(param.dtype())) [[unlikely]] {
    // The step in float32 on widened copies, rounded back once (Note [Half precision]).
    NoGradGuard no_grad;
    const Tensor p32 = to_float32(param);
    const Tensor m32 = momentum_buf.defined() ? to_float32(momentum_buf) : momentum_buf;
    backend_of(param.device()).sgd_step(p32, to_float32(g), m32, device, p);
    store_converted(p32, param);
    if (m32.defined()) store_converted(m32, momentum_buf);
    return;
  }
  backend_of(param.device()).sgd_step(param, g, momentum_buf, device, p);
}

void adam_step(const ParamSite& site, const Tensor& param, const Tensor& grad,
               const Tensor& exp_avg, const Tensor& exp_avg_sq, const DeviceStepState& device,
               const AdamParams& p) {
  const Tensor g =
      checked_grad(site, param, grad, {{"exp_avg", &exp_avg}, {"exp_avg_sq", &exp_avg_sq}});
  check_device_state(site, param, device);
  if (is_half(param.dtype())) [[unlikely]] {  // as sgd_step
    NoGradGuard no_grad;
    const Tensor p32 = to_float32(param), m32 = to_float32(exp_avg), v32 = to_float32(exp_avg_sq);
    backend_of(param.device()).adam_step(p32, to_float32(g), m32, v32, device, p);
    store_converted(p32, param);
    store_converted(m32, exp_avg);
    store_converted(v32, exp_avg_sq);
    return;
  }
  backend_of(param.device()).adam_step(param, g, exp_avg, exp_avg_sq, device, p);
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
