#pragma once
// The per-element math of the fused optimizer steps and of the gradient scaler's unscale,
// written once for the CPU (cpu_optim.cpp) and the GPU (kernels_optim.cu), as
// elementwise_functors.h is for elementwise ops: the CPU's tests check what a GPU runs.
//
// Note [Optimizer math]
// Each update is a small object made once per step from the step's parameters (in the
// parameter's type) and called per element. Written this way the CPU's loops vectorize,
// which they did not before (GCC 12, -fopt-info-vec: "control flow in loop"): the element
// code has no branches, only selects (weight decay, Nesterov, the first step), the CPU runs
// one loop with a momentum buffer and one without over local pointers (cpu_optim.cpp), and
// sqrt needs no errno (-fno-math-errno, src/CMakeLists.txt). An SGD step with momentum over
// the MLP's 203,530 floats went from 229-301 us to 36-37 us, an Adam step from 814-1098 us
// to 104-114 us (tessera_bench optimizer_step/*, one thread; docs/benchmarks.md). On a GPU
// the per-element choices are uniform across threads and cost nothing.

#include <cmath>

#include "backend/backend.h"
#include "backend/philox.h"  // TESSERA_HOST_DEVICE

namespace tessera::detail {

// Adam's bias corrections for step t (from 1), in double from the options' own betas, as
// PyTorch computes them: step_size = lr / (1 - beta1^t), sqrt(1 - beta2^t). The host calls
// it with its count; a recorded step's kernel with the count it reads on the device.
TESSERA_HOST_DEVICE inline void set_adam_step(AdamParams& p, double t) {
  p.step_size = p.lr / (1 - std::pow(p.beta1, t));
  p.bias_correction2_sqrt = std::sqrt(1 - std::pow(p.beta2, t));
}

// SgdParams in the parameter's type.
template <typename T>
struct SgdUpdate {
  T lr, momentum, damp, weight_decay;  // damp = 1 - dampening
  bool decays, nesterov;               // decays: weight_decay != 0

  SgdUpdate() = default;  // unset: a slot of a kernel's parameters, filled before use
  explicit SgdUpdate(const SgdParams& p)
      : lr(static_cast<T>(p.lr)),
        momentum(static_cast<T>(p.momentum)),
        damp(static_cast<T>(1 - p.dampening)),
        weight_decay(static_cast<T>(p.weight_decay)),
        decays(p.weight_decay != 0),
        nesterov(p.nesterov) {}

  // Without momentum: w -= lr * (g + weight_decay * w).
  TESSERA_HOST_DEVICE void operator()(T& w, T g) const { w -= lr * decayed(w, g); }

  // With a momentum buffer, which on the first step becomes the decayed gradient itself.
  TESSERA_HOST_DEVICE void operator()(T& w, T g, T& buf, bool first_step) const {
    const T d = decayed(w, g);
    const T m = first_step ? d : momentum * buf + damp * d;
    buf = m;
    w -= lr * (nesterov ? d + momentum * m : m);
  }

 private:
  // Selects, not branches, so that CPU loops vectorize (Note [Optimizer math]).
  TESSERA_HOST_DEVICE T decayed(T w, T g) const { return decays ? g + weight_decay * w : g; }
};

// AdamParams in the parameter's type.
template <typename T>
struct AdamUpdate {
  T beta1, beta2, eps, weight_decay, decay, step_size, bc2_sqrt;  // decay = 1 - lr * wd
  // 1 - beta in double, then rounded: 1 - float(0.99999) is 0.14% off 1e-5, a bias in v
  // that the corrections (from the double betas) do not share (as torch, and SgdUpdate).
  T one_minus_beta1, one_minus_beta2;
  bool decay_weight, decay_grad;  // AdamW's decay of the weight, or Adam's of the gradient

  AdamUpdate() = default;  // as SgdUpdate's
  explicit AdamUpdate(const AdamParams& p)
      : beta1(static_cast<T>(p.beta1)),
        beta2(static_cast<T>(p.beta2)),
        eps(static_cast<T>(p.eps)),
        weight_decay(static_cast<T>(p.weight_decay)),
        decay(static_cast<T>(1 - p.lr * p.weight_decay)),
        step_size(static_cast<T>(p.step_size)),
        bc2_sqrt(static_cast<T>(p.bias_correction2_sqrt)),
        one_minus_beta1(static_cast<T>(1 - p.beta1)),
        one_minus_beta2(static_cast<T>(1 - p.beta2)),
        decay_weight(p.weight_decay != 0 && p.decoupled),
        decay_grad(p.weight_decay != 0 && !p.decoupled) {}

  // The corrections of step t (a recorded step's count, read on the device).
  TESSERA_HOST_DEVICE void at_step(AdamParams p, double t) {
    set_adam_step(p, t);
    step_size = static_cast<T>(p.step_size);
    bc2_sqrt = static_cast<T>(p.bias_correction2_sqrt);
  }

  // One element: weight decay, the two moments, and the corrected step.
  TESSERA_HOST_DEVICE void operator()(T& w, T g, T& m, T& v) const {
    const T wi = decay_weight ? w * decay : w;
    const T gi = decay_grad ? g + weight_decay * w : g;
    const T mi = beta1 * m + one_minus_beta1 * gi;
    const T vi = beta2 * v + one_minus_beta2 * gi * gi;
    m = mi;
    v = vi;
    w = wi - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
  }
};

// g *= inv; whether g was not finite (inf or NaN: a GradScaler skips the step).
template <typename T>
TESSERA_HOST_DEVICE inline bool unscale_element(T& g, T inv) {
#ifdef __CUDA_ARCH__
  const bool bad = !isfinite(g);
#else
  const bool bad = !std::isfinite(g);
#endif
  g *= inv;
  return bad;
}

}  // namespace tessera::detail
