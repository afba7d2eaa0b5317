// CPU optimizer steps: one fused pass per parameter (SGD, Adam/AdamW), the parameters of a
// step queued as one task, and the gradient scaler's unscale-and-check pass, queued on the
// parameter's device like every other kernel. The math is optimizer_math.h's, which the GPU runs
// too.
#include <atomic>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernel_data.h"
#include "backend/cpu/strided_loop.h"
#include "backend/optimizer_math.h"
#include "core/dispatch.h"
#include "core/tensor_impl.h"

namespace tessera::detail::TESSERA_CPU_ISA {  // built once per level: cpu_backend.h
namespace {

// Calls f(begin, end) on ranges that cover [0, n), one per OpenMP thread when n is large.
// The loops are the callers' own, over local pointers, so that GCC vectorizes them (Note
// [Optimizer math]).
template <typename F>
void parallel_ranges(std::int64_t n, F&& f) {
  if (n < kParallelGrain || omp_get_max_threads() == 1 || omp_in_parallel()) {
    f(std::int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const std::int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    f(n * t / threads, n * (t + 1) / threads);
  }
}

// Whether a 0-dim float32 flag of DeviceStepState is set (undefined: not set).
bool flag_set(const Tensor& flag) { return flag.defined() && *data_of<float>(flag) != 0; }

// g[i] *= inv for every i; whether any g[i] was not finite.
template <typename T>
bool unscale_span(T* g, std::int64_t n, T inv) {
  std::atomic<bool> any_bad{false};
  parallel_ranges(n, [&any_bad, g, inv](std::int64_t begin, std::int64_t end) {
    unsigned bad = 0;  // an integer: GCC vectorizes an OR of these, not of bools
    for (std::int64_t i = begin; i < end; ++i) bad |= unscale_element(g[i], inv) ? 1u : 0u;
    if (bad != 0) any_bad.store(true, std::memory_order_relaxed);
  });
  return any_bad.load(std::memory_order_relaxed);
}

}  // namespace

// Each step's tensors in the list a queued task holds: param, grad, state, then the
// DeviceStepState flags.
constexpr std::size_t kSgdTensors = 5, kAdamTensors = 6;

void CpuBackend::sgd_steps(std::span<const SgdStep> steps, const SgdParams& p) {
  if (steps.empty()) return;
  std::vector<Tensor> tensors;
  tensors.reserve(kSgdTensors * steps.size());
  std::vector<char> first(steps.size());
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const SgdStep& s = steps[k];
    tensors.insert(tensors.end(),
                   {s.param, s.grad, s.momentum_buf, s.device.found_inf, s.device.first_step});
    first[k] = s.first_step ? 1 : 0;
  }
  launch_with_all(
      steps.front().param.device().index(),
      [p, first = std::move(first)](const std::vector<Tensor>& t) {
        for (std::size_t k = 0; k < first.size(); ++k) {
          const Tensor* s = &t[kSgdTensors * k];
          const Tensor &param = s[0], &grad = s[1], &buf = s[2];
          if (flag_set(s[3])) continue;
          const bool first_step = first[k] != 0 || flag_set(s[4]);
          dispatch_floating(param.dtype(), [&](auto tag) {
            using T = typename decltype(tag)::type;
            T* w = data_of<T>(param);
            const T* g = data_of<T>(grad);
            T* b = buf.defined() ? data_of<T>(buf) : nullptr;
            const SgdUpdate<T> update(p);
            parallel_ranges(param.numel(), [=](std::int64_t begin, std::int64_t end) {
              if (b == nullptr) {
                for (std::int64_t i = begin; i < end; ++i) update(w[i], g[i]);
              } else {
                for (std::int64_t i = begin; i < end; ++i) update(w[i], g[i], b[i], first_step);
              }
            });
          });
        }
      },
      std::move(tensors));
}

void CpuBackend::adam_steps(std::span<const AdamStep> steps) {
  if (steps.empty()) return;
  std::vector<Tensor> tensors;
  tensors.reserve(kAdamTensors * steps.size());
  std::vector<AdamParams> params(steps.size());
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const AdamStep& s = steps[k];
    tensors.insert(tensors.end(),
                   {s.param, s.grad, s.exp_avg, s.exp_avg_sq, s.device.step, s.device.found_inf});
    params[k] = s.p;
  }
  launch_with_all(
      steps.front().param.device().index(),
      [params = std::move(params)](const std::vector<Tensor>& t) {
        for (std::size_t k = 0; k < params.size(); ++k) {
          const Tensor* s = &t[kAdamTensors * k];
          const Tensor &param = s[0], &step = s[4];
          if (flag_set(s[5])) continue;
          dispatch_floating(param.dtype(), [&](auto tag) {
            using T = typename decltype(tag)::type;
            T* w = data_of<T>(param);
            const T* g = data_of<T>(s[1]);
            T* mp = data_of<T>(s[2]);
            T* vp = data_of<T>(s[3]);
            AdamUpdate<T> update(params[k]);
            if (step.defined()) update.at_step(params[k], *data_of<double>(step));
            parallel_ranges(param.numel(), [=](std::int64_t begin, std::int64_t end) {
              for (std::int64_t i = begin; i < end; ++i) update(w[i], g[i], mp[i], vp[i]);
            });
          });
        }
      },
      std::move(tensors));
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
