// clip_grad_norm_: the global norm and the scaling stay 0-dim device tensors, so clipping
// never reads a value on the host (the clamp is a minimum op, not an `if`).
#include "tessera/optim/clip.h"

#include <cmath>

#include "core/check.h"
#include "ops/broadcast.h"
#include "tessera/autograd.h"
#include "tessera/device_scope.h"
#include "tessera/factories.h"
#include "tessera/ops.h"

namespace tessera::optim {

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  TESSERA_CHECK(std::isfinite(max_norm) && max_norm >= 0, Error,
                "[clip_grad_norm_] invalid max_norm={}: it must be a finite number >= 0", max_norm);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  std::vector<std::size_t> owner;  // grads[k] is params[owner[k]]'s
  std::size_t first = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    TESSERA_CHECK(params[i].defined(), Error, "[clip_grad_norm_] parameter {} is undefined", i);
    Tensor g = params[i].grad();
    if (!g.defined()) continue;
    if (grads.empty()) first = i;
    TESSERA_CHECK(grads.empty() || g.device() == grads[0].device(), DeviceMismatchError,
                  "[clip_grad_norm_] gradients are on different devices: parameter {}'s on {}, "
                  "parameter {}'s on {}; the norm of them all would need them on one device. "
                  "Move the parameters to one device, or clip each device's parameters "
                  "separately (each then by its own norm, not the norm of them all)",
                  first, grads[0].device().str(), i, g.device().str());
    grads.push_back(std::move(g));
    owner.push_back(i);
  }
  if (grads.empty()) {
    return zeros(Shape{}, {kFloat32, params.empty() ? default_device() : params[0].device()});
  }
  // As PyTorch: the norm of the per-parameter norms, but in float32 for half grads: a
  // float16 norm of 256 squared is inf, which would zero every gradient. norm() of the
  // stacked norms, not the square root of their squares: a float32 norm above 1.8e19 squared
  // is inf too (the grads were zeroed, not clipped), and one below 1e-23 is 0.
  std::vector<Tensor> norms;
  for (const Tensor& g : grads) norms.push_back(norm(is_half(g.dtype()) ? g.to(kFloat32) : g));
  const Tensor total = norms.size() == 1 ? norms[0] : norm(stack(norms));
  const Tensor scale = minimum(div(max_norm, add(total, 1e-6)), 1.0);
  for (std::size_t k = 0; k < grads.size(); ++k) {
    if (detail::writable(grads[k])) {
      grads[k].mul_(scale);
    } else {
      // An expanded grad (set_grad takes one) shares memory between elements: scaled in
      // place it refused after the earlier grads were clipped, and a retry clipped them twice.
      Tensor p = params[owner[k]];
      p.set_grad(mul(grads[k], scale));
    }
  }
  return total;
}

}  // namespace tessera::optim
