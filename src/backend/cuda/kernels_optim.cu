// CUDA optimizer steps and gradient unscaling: one grid-stride kernel per parameter, the
// math of cpu_optim.cpp. Tensors are contiguous, so indices are plain 64-bit offsets. A set
// found_inf makes every thread return before writing (GradScaler's skip, no host read).
#include "backend/cuda/kernel_utils.cuh"
#include "core/dispatch.h"

namespace tessera::detail::cuda {
namespace {

template <typename T>
struct SgdArgs {
  T* w;
  const T* g;
  T* buf;  // nullptr without momentum
  std::int64_t n;
  T lr, momentum, damp, weight_decay;
  bool nesterov, first_step;
  StepFlags flags;
};

template <typename T>
__global__ void sgd_kernel(SgdArgs<T> a) {
  if (a.flags.found_inf != nullptr && *a.flags.found_inf != 0) return;
  const bool first_step =
      a.first_step || (a.flags.first_step != nullptr && *a.flags.first_step != 0);
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < a.n;
       i += stride) {
    T d = a.g[i];
    if (a.weight_decay != T(0)) d += a.weight_decay * a.w[i];
    if (a.buf != nullptr) {
      const T m = first_step ? d : a.momentum * a.buf[i] + a.damp * d;
      a.buf[i] = m;
      d = a.nesterov ? d + a.momentum * m : m;
    }
    a.w[i] -= a.lr * d;
  }
}

template <typename T>
struct AdamArgs {
  T* w;
  const T* g;
  T* m;
  T* v;
  std::int64_t n;
  T beta1, beta2, eps, weight_decay, decay, step_size, bc2_sqrt;
  bool decoupled;
  StepFlags flags;  // flags.step: the device's step count, or nullptr: step_size and bc2_sqrt hold
  double lr;
};

template <typename T>
__global__ void adam_kernel(AdamArgs<T> a) {
  if (a.flags.found_inf != nullptr && *a.flags.found_inf != 0) return;
  if (a.flags.step != nullptr) {  // a recorded step: the corrections of this replay's count
    const double t = *a.flags.step;
    a.step_size = static_cast<T>(a.lr / (1 - pow(static_cast<double>(a.beta1), t)));
    a.bc2_sqrt = static_cast<T>(sqrt(1 - pow(static_cast<double>(a.beta2), t)));
  }
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < a.n;
       i += stride) {
    T gi = a.g[i];
    T wi = a.w[i];
    if (a.weight_decay != T(0)) {
      if (a.decoupled) {
        wi *= a.decay;
      } else {
        gi += a.weight_decay * wi;
      }
    }
    const T mi = a.beta1 * a.m[i] + (T(1) - a.beta1) * gi;
    const T vi = a.beta2 * a.v[i] + (T(1) - a.beta2) * gi * gi;
    a.m[i] = mi;
    a.v[i] = vi;
    a.w[i] = wi - a.step_size * mi / (sqrt(vi) / a.bc2_sqrt + a.eps);
  }
}

// g *= inv_scale; any non-finite element sets found_inf (racing threads all write 1).
template <typename T>
__global__ void unscale_kernel(T* g, std::int64_t n, const float* inv_scale, float* found_inf) {
  const T inv = static_cast<T>(*inv_scale);
  bool bad = false;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    const T v = g[i];
    bad |= !isfinite(v);
    g[i] = v * inv;
  }
  if (bad) *found_inf = 1.0f;
}

}  // namespace

void launch_sgd_step(StreamHandle s, const KernelArg& param, const KernelArg& grad,
                     const KernelArg& momentum_buf, const StepFlags& flags, const SgdParams& p) {
  TESSERA_CUDA_EXPECT(param.dtype == grad.dtype && param.numel == grad.numel,
                      "sgd_step operands differ in dtype or size");
  if (param.numel == 0) return;
  const auto stream = static_cast<cudaStream_t>(s);
  dispatch_floating(param.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    SgdArgs<T> a{static_cast<T*>(param.data),
                 static_cast<const T*>(grad.data),
                 static_cast<T*>(momentum_buf.data),
                 param.numel,
                 static_cast<T>(p.lr),
                 static_cast<T>(p.momentum),
                 static_cast<T>(1 - p.dampening),
                 static_cast<T>(p.weight_decay),
                 p.nesterov,
                 p.first_step,
                 flags};
    sgd_kernel<T><<<grid_for<sgd_kernel<T>>(param.numel), kThreads, 0, stream>>>(a);
  });
  TESSERA_CUDA_CHECK_LAUNCH(stream, "sgd_step");
}

void launch_adam_step(StreamHandle s, const KernelArg& param, const KernelArg& grad,
                      const KernelArg& m, const KernelArg& v, const StepFlags& flags,
                      const AdamParams& p) {
  TESSERA_CUDA_EXPECT(param.dtype == grad.dtype && param.numel == grad.numel,
                      "adam_step operands differ in dtype or size");
  if (param.numel == 0) return;
  const auto stream = static_cast<cudaStream_t>(s);
  dispatch_floating(param.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    AdamArgs<T> a{static_cast<T*>(param.data),
                  static_cast<const T*>(grad.data),
                  static_cast<T*>(m.data),
                  static_cast<T*>(v.data),
                  param.numel,
                  static_cast<T>(p.beta1),
                  static_cast<T>(p.beta2),
                  static_cast<T>(p.eps),
                  static_cast<T>(p.weight_decay),
                  static_cast<T>(1 - p.lr * p.weight_decay),
                  static_cast<T>(p.step_size),
                  static_cast<T>(p.bias_correction2_sqrt),
                  p.decoupled,
                  flags,
                  p.lr};
    adam_kernel<T><<<grid_for<adam_kernel<T>>(param.numel), kThreads, 0, stream>>>(a);
  });
  TESSERA_CUDA_CHECK_LAUNCH(stream, "adam_step");
}

void launch_unscale_grad(StreamHandle s, const KernelArg& grad, const float* inv_scale,
                         float* found_inf) {
  if (grad.numel == 0) return;
  const auto stream = static_cast<cudaStream_t>(s);
  dispatch_floating(grad.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto* g = static_cast<T*>(grad.data);
    unscale_kernel<T><<<grid_for<unscale_kernel<T>>(grad.numel), kThreads, 0, stream>>>(
        g, grad.numel, inv_scale, found_inf);
  });
  TESSERA_CUDA_CHECK_LAUNCH(stream, "unscale_grad");
}

}  // namespace tessera::detail::cuda
