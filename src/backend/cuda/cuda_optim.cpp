// The CUDA backend's optimizer steps and gradient unscaling: each passes its tensors to a
// launcher on the parameters' device stream (kernels_optim.cu). Nothing here waits.
#include <vector>

#include "backend/cuda/cuda_backend.h"

namespace tessera::detail {
namespace {

template <typename T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(kernel_arg(t).data) : nullptr;
}

cuda::StepFlags flags_of(const DeviceStepState& device) {
  return {data_or_null<float>(device.found_inf), data_or_null<double>(device.step),
          data_or_null<float>(device.first_step)};
}

}  // namespace

void CudaBackend::sgd_steps(std::span<const SgdStep> steps, const SgdParams& p) {
  if (steps.empty()) return;
  std::vector<cuda::SgdStepArg> args;
  args.reserve(steps.size());
  for (const SgdStep& s : steps) {
    args.push_back({kernel_arg(s.param), kernel_arg(s.grad),
                    s.momentum_buf.defined() ? kernel_arg(s.momentum_buf) : cuda::KernelArg{},
                    flags_of(s.device), s.first_step});
  }
  cuda::launch_sgd_steps(activate(steps.front().param.device().index()), args, p);
}

void CudaBackend::adam_steps(std::span<const AdamStep> steps) {
  if (steps.empty()) return;
  std::vector<cuda::AdamStepArg> args;
  args.reserve(steps.size());
  for (const AdamStep& s : steps) {
    args.push_back({kernel_arg(s.param), kernel_arg(s.grad), kernel_arg(s.exp_avg),
                    kernel_arg(s.exp_avg_sq), flags_of(s.device), s.p});
  }
  cuda::launch_adam_steps(activate(steps.front().param.device().index()), args);
}

void CudaBackend::unscale_grad(const Tensor& grad, const Tensor& inv_scale,
                               const Tensor& found_inf) {
  cuda::launch_unscale_grad(activate(grad.device().index()), kernel_arg(grad),
                            static_cast<const float*>(kernel_arg(inv_scale).data),
                            static_cast<float*>(kernel_arg(found_inf).data));
}

}  // namespace tessera::detail
