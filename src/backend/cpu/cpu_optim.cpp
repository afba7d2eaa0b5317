// CPU optimizer steps: one fused pass per parameter (SGD, Adam/AdamW), and the gradient
// scaler's unscale-and-check pass, queued on the parameter's device like every other
// kernel. The math mirrors kernels_optim.cu.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/strided_loop.h"
#include "core/dispatch.h"
#include "core/tensor_impl.h"

namespace tessera::detail::TESSERA_CPU_ISA {  // built once per level: cpu_backend.h
namespace {

// Calls f(i) for i in [0, n), split across the OpenMP pool when large.
template <typename F>
void parallel_for(std::int64_t n, F&& f) {
  if (n < kParallelGrain || omp_get_max_threads() == 1 || omp_in_parallel()) {
    for (std::int64_t i = 0; i < n; ++i) f(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) f(i);
}

template <typename T>
T* data_of(const Tensor& t) {
  return reinterpret_cast<T*>(impl_of(t).data());
}

// Whether a 0-dim float32 flag of DeviceStepState is set (undefined: not set).
bool flag_set(const Tensor& flag) { return flag.defined() && *data_of<float>(flag) != 0; }

// g[i] *= inv for every i; whether any g[i] was not finite.
template <typename T>
bool unscale_span(T* g, std::int64_t n, T inv) {
  bool bad = false;
  if (n < kParallelGrain || omp_get_max_threads() == 1 || omp_in_parallel()) {
    for (std::int64_t i = 0; i < n; ++i) {
      bad |= !std::isfinite(g[i]);
      g[i] *= inv;
    }
    return bad;
  }
#pragma omp parallel for schedule(static) reduction(|| : bad)
  for (std::int64_t i = 0; i < n; ++i) {
    bad = bad || !std::isfinite(g[i]);
    g[i] *= inv;
  }
  return bad;
}

}  // namespace

void CpuBackend::sgd_step(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                          const DeviceStepState& device, const SgdParams& p) {
  launch_with(
      param.device().index(),
      [p](const Tensor& param, const Tensor& grad, const Tensor& buf, const Tensor& found_inf,
          const Tensor& first_flag) {
        if (flag_set(found_inf)) return;
        const bool first_step = p.first_step || flag_set(first_flag);
        dispatch_floating(param.dtype(), [&](auto tag) {
          using T = typename decltype(tag)::type;
          T* w = data_of<T>(param);
          const T* g = data_of<T>(grad);
          T* b = buf.defined() ? data_of<T>(buf) : nullptr;
          const T lr = static_cast<T>(p.lr), mu = static_cast<T>(p.momentum);
          const T wd = static_cast<T>(p.weight_decay), damp = static_cast<T>(1 - p.dampening);
          parallel_for(param.numel(), [&](std::int64_t i) {
            T d = g[i];
            if (p.weight_decay != 0) d += wd * w[i];
            if (b != nullptr) {
              const T m = first_step ? d : mu * b[i] + damp * d;
              b[i] = m;
              d = p.nesterov ? d + mu * m : m;
            }
            w[i] -= lr * d;
          });
        });
      },
      param, grad, momentum_buf, device.found_inf, device.first_step);
}

void CpuBackend::adam_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                           const Tensor& v, const DeviceStepState& device, const AdamParams& p) {
  launch_with(
      param.device().index(),
      [p](const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
          const Tensor& step, const Tensor& found_inf) {
        if (flag_set(found_inf)) return;
        dispatch_floating(param.dtype(), [&](auto tag) {
          using T = typename decltype(tag)::type;
          T* w = data_of<T>(param);
          const T* g = data_of<T>(grad);
          T* mp = data_of<T>(m);
          T* vp = data_of<T>(v);
          const T b1 = static_cast<T>(p.beta1), b2 = static_cast<T>(p.beta2);
          const T wd = static_cast<T>(p.weight_decay), eps = static_cast<T>(p.eps);
          const T decay = static_cast<T>(1 - p.lr * p.weight_decay);
          double host_step_size = p.step_size, host_bc2_sqrt = p.bias_correction2_sqrt;
          if (step.defined()) {
            const double t = *data_of<double>(step);
            host_step_size = p.lr / (1 - std::pow(p.beta1, t));
            host_bc2_sqrt = std::sqrt(1 - std::pow(p.beta2, t));
          }
          const T step_size = static_cast<T>(host_step_size);
          const T bc2_sqrt = static_cast<T>(host_bc2_sqrt);
          parallel_for(param.numel(), [&](std::int64_t i) {
            T gi = g[i];
            T wi = w[i];
            if (p.weight_decay != 0) {
              if (p.decoupled) {
                wi *= decay;
              } else {
                gi += wd * wi;
              }
            }
            const T mi = b1 * mp[i] + (1 - b1) * gi;
            const T vi = b2 * vp[i] + (1 - b2) * gi * gi;
            mp[i] = mi;
            vp[i] = vi;
            w[i] = wi - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
          });
        });
      },
      param, grad, m, v, device.step, device.found_inf);
}

void CpuBackend::unscale_grad(const Tensor& grad, const Tensor& inv_scale,
                              const Tensor& found_inf) {
  launch_with(
      grad.device().index(),
      [](const Tensor& grad, const Tensor& inv_scale, const Tensor& found_inf) {
        const float inv = *data_of<float>(inv_scale);
        dispatch_floating(grad.dtype(), [&](auto tag) {
          using T = typename decltype(tag)::type;
          if (unscale_span(data_of<T>(grad), grad.numel(), static_cast<T>(inv))) {
            *data_of<float>(found_inf) = 1;
          }
        });
      },
      grad, inv_scale, found_inf);
}

}  // namespace tessera::detail::TESSERA_CPU_ISA
