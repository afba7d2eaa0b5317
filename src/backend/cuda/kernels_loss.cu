// CUDA cross-entropy on logits, fused with a stable log-softmax: one warp per row (class
// counts are small in practice; a warp strides over larger rows). The math matches
// cpu_loss.cpp: the max is subtracted before exp and the sum of exps accumulates in double.
#include <cuda_runtime.h>

#include <cstdint>
#include <cuda/std/limits>

#include "backend/cuda/kernel_utils.cuh"
#include "core/dispatch.h"

namespace tessera::detail::cuda {
namespace {

using i64 = std::int64_t;
constexpr int kWarpsPerBlock = kThreads / 32;

__device__ __forceinline__ float exp_t(float v) { return expf(v); }
__device__ __forceinline__ double exp_t(double v) { return exp(v); }

template <typename T>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_kernel(const T* __restrict__ logits, const i64* __restrict__ targets,
                         T* __restrict__ losses, T* __restrict__ probs, i64 rows, i64 classes) {
  const i64 row = static_cast<i64>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;  // whole warps leave together
  const int lane = threadIdx.x % 32;
  const T* x = logits + row * classes;
  T* p = probs + row * classes;
  T mx = -::cuda::std::numeric_limits<T>::infinity();
  for (i64 c = lane; c < classes; c += 32) mx = x[c] > mx ? x[c] : mx;
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    const T o = __shfl_xor_sync(0xffffffffu, mx, off);
    mx = o > mx ? o : mx;
  }
  double sum = 0;
  for (i64 c = lane; c < classes; c += 32) {
    const T e = exp_t(x[c] - mx);
    p[c] = e;
    sum += static_cast<double>(e);
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  const T scale = static_cast<T>(1.0 / sum);
  for (i64 c = lane; c < classes; c += 32) p[c] *= scale;
  if (lane == 0) {
    const i64 t = targets[row];
    losses[row] = t >= 0 && t < classes ? static_cast<T>(log(sum)) - (x[t] - mx)
                                        : ::cuda::std::numeric_limits<T>::quiet_NaN();
  }
}

template <typename T>
__global__ void cross_entropy_backward_kernel(const T* __restrict__ probs,
                                              const i64* __restrict__ targets,
                                              const T* __restrict__ grad_losses, i64 grad_stride,
                                              T divisor, T* __restrict__ grad_logits, i64 n,
                                              i64 classes) {
  const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    const i64 row = i / classes, c = i % classes;
    const i64 target = targets[row];
    const T hot = target == c ? T(1) : T(0);
    // As on the CPU: a target outside [0, classes) gives NaN, as its loss does.
    const T g = grad_losses[row * grad_stride] / divisor;
    grad_logits[i] = target >= 0 && target < classes ? (probs[i] - hot) * g
                                                     : ::cuda::std::numeric_limits<T>::quiet_NaN();
  }
}

}  // namespace

void launch_cross_entropy(StreamHandle s, const KernelArg& logits, const KernelArg& targets,
                          const KernelArg& losses, const KernelArg& probs) {
  TESSERA_CUDA_EXPECT(logits.ndim == 2 && targets.dtype == Dtype::kInt64,
                      "cross_entropy operands are not [N, C] logits and int64 targets");
  const i64 rows = logits.sizes[0], classes = logits.sizes[1];
  if (rows == 0) return;
  const auto stream = static_cast<cudaStream_t>(s);
  const unsigned blocks = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  dispatch_floating(logits.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cross_entropy_kernel<T><<<blocks, kThreads, 0, stream>>>(
        static_cast<const T*>(logits.data), static_cast<const i64*>(targets.data),
        static_cast<T*>(losses.data), static_cast<T*>(probs.data), rows, classes);
  });
  TESSERA_CUDA_CHECK_LAUNCH(stream, "cross_entropy");
}

void launch_cross_entropy_backward(StreamHandle s, const KernelArg& probs, const KernelArg& targets,
                                   const KernelArg& grad_losses, double divisor,
                                   const KernelArg& grad_logits) {
  TESSERA_CUDA_EXPECT(grad_losses.ndim == 1, "cross_entropy_backward's grad is not [N]");
  if (probs.numel == 0) return;
  const auto stream = static_cast<cudaStream_t>(s);
  dispatch_floating(probs.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr auto kernel = cross_entropy_backward_kernel<T>;
    kernel<<<grid_for<kernel>(probs.numel), kThreads, 0, stream>>>(
        static_cast<const T*>(probs.data), static_cast<const i64*>(targets.data),
        static_cast<const T*>(grad_losses.data), grad_losses.strides[0], static_cast<T>(divisor),
        static_cast<T*>(grad_logits.data), probs.numel, probs.sizes[1]);
  });
  TESSERA_CUDA_CHECK_LAUNCH(stream, "cross_entropy_backward");
}

}  // namespace tessera::detail::cuda
