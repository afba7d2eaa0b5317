// CPU cross-entropy on logits, fused with a stable log-softmax (the math of
// kernels_loss.cu): the max is subtracted before exp and the sum of exps accumulates in
// double. Rows are independent, so they split across the OpenMP pool.
#include <omp.h>

#include <cmath>
#include <limits>
#include <type_traits>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernel_data.h"
#include "backend/cpu/strided_loop.h"
#include "backend/cpu/vector_math.h"
#include "core/dispatch.h"
#include "core/tensor_impl.h"

namespace tessera::detail::TESSERA_CPU_ISA {  // built once per level: cpu_backend.h
namespace {

using i64 = std::int64_t;

template <typename T>
void cross_entropy_rows(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                        const Tensor& probs) {
  const i64 rows = logits.size(0), classes = logits.size(1);
  const T* x = data_of<T>(logits);
  const i64* t = data_of<i64>(targets);
  T* loss = data_of<T>(losses);
  T* p = data_of<T>(probs);
  const bool serial = rows * classes < kParallelGrain || omp_in_parallel();
#pragma omp parallel for schedule(static) if (!serial)
  for (i64 r = 0; r < rows; ++r) {
    const T* xr = x + r * classes;
    T* pr = p + r * classes;
    T mx = -std::numeric_limits<T>::infinity();
    double sum = 0;
    if constexpr (std::is_same_v<T, float>) {
      // Vectorized as a float softmax row (cpu_softmax.cpp): same max, same exps as there.
      mx = max_vectorizable(xr, classes);
      sum = exp_sum_vectorizable(xr, classes, mx, pr);
    } else {
      for (i64 c = 0; c < classes; ++c) mx = xr[c] > mx ? xr[c] : mx;
      for (i64 c = 0; c < classes; ++c) {
        pr[c] = std::exp(xr[c] - mx);
        sum += static_cast<double>(pr[c]);
      }
    }
    const T scale = static_cast<T>(1.0 / sum);
    for (i64 c = 0; c < classes; ++c) pr[c] *= scale;
    const i64 target = t[r];
    loss[r] = target >= 0 && target < classes ? static_cast<T>(std::log(sum)) - (xr[target] - mx)
                                              : std::numeric_limits<T>::quiet_NaN();
  }
}

template <typename T>
void cross_entropy_grad_rows(const Tensor& probs, const Tensor& targets, const Tensor& grad_losses,
                             T divisor, const Tensor& grad_logits) {
  const i64 rows = probs.size(0), classes = probs.size(1);
  const T* p = data_of<T>(probs);
  const i64* t = data_of<i64>(targets);
  const T* g = data_of<T>(grad_losses);
  const i64 g_stride = grad_losses.stride(0);
  T* out = data_of<T>(grad_logits);
  const bool serial = rows * classes < kParallelGrain || omp_in_parallel();
#pragma omp parallel for schedule(static) if (!serial)
  for (i64 r = 0; r < rows; ++r) {
    // A target outside [0, classes) made the row's loss NaN; its gradient is NaN too, not
    // the finite softmax * g an optimizer would step on.
    const bool valid = t[r] >= 0 && t[r] < classes;
    const T gr = g[r * g_stride] / divisor;
    for (i64 c = 0; c < classes; ++c) {
      out[r * classes + c] = valid ? (p[r * classes + c] - (t[r] == c ? T(1) : T(0))) * gr
                                   : std::numeric_limits<T>::quiet_NaN();
    }
  }
}

}  // namespace

void CpuBackend::cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                               const Tensor& probs) {
  launch_with(
      logits.device().index(),
      [](const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& probs) {
        dispatch_floating(logits.dtype(), [&](auto tag) {
          cross_entropy_rows<typename decltype(tag)::type>(logits, targets, losses, probs);
        });
      },
      logits, targets, losses, probs);
}

void CpuBackend::cross_entropy_backward(const Tensor& probs, const Tensor& targets,
                                        const Tensor& grad_losses, double divisor,
                                        const Tensor& grad_logits) {
  launch_with(
      probs.device().index(),
      [divisor](const Tensor& probs, const Tensor& targets, const Tensor& grad_losses,
                const Tensor& grad_logits) {
        dispatch_floating(probs.dtype(), [&](auto tag) {
          using T = typename decltype(tag)::type;
          cross_entropy_grad_rows<T>(probs, targets, grad_losses, static_cast<T>(divisor),
                                     grad_logits);
        });
      },
      probs, targets, grad_losses, grad_logits);
}

}  // namespace tessera::detail::TESSERA_CPU_ISA
