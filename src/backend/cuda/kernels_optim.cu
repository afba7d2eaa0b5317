// CUDA optimizer steps and gradient unscaling: one grid-stride kernel per parameter, with
// the math of optimizer_math.h, which the CPU runs too. Tensors are contiguous, so indices are
// plain 64-bit offsets. A set found_inf makes every thread return before writing (GradScaler's
// skip, no host read).
#include "backend/cuda/kernel_utils.cuh"
#include "backend/optimizer_math.h"
#include "core/dispatch.h"

namespace tessera::detail::cuda {
namespace {

template <typename T>
struct SgdArgs {
  T* w;
  const T* g;
  T* buf;  // nullptr without momentum
  std::int64_t n;
  SgdUpdate<T> update;
  bool first_step;
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
    if (a.buf != nullptr) {
      a.update(a.w[i], a.g[i], a.buf[i], first_step);
    } else {
      a.update(a.w[i], a.g[i]);
    }
  }
}

template <typename T>
struct AdamArgs {
  T* w;
  const T* g;
  T* m;
  T* v;
  std::int64_t n;
  AdamUpdate<T> update;
  AdamParams params;  // for a recorded step's corrections
  StepFlags flags;    // flags.step: the device's step count, or nullptr: `update` holds them
};

template <typename T>
__global__ void adam_kernel(AdamArgs<T> a) {
  if (a.flags.found_inf != nullptr && *a.flags.found_inf != 0) return;
  if (a.flags.step != nullptr) a.update.at_step(a.params, *a.flags.step);  // a recorded step
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < a.n;
       i += stride) {
    a.update(a.w[i], a.g[i], a.m[i], a.v[i]);
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
    bad |= unscale_element(g[i], inv);
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
                 SgdUpdate<T>(p),
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
                  AdamUpdate<T>(p),
                  p,
                  flags};
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
