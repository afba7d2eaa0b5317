// The CUDA backend's optimizer steps and gradient unscaling: each passes its tensors to a
// launcher on the parameter's device stream (kernels_optim.cu). Nothing here waits.
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

void CudaBackend::sgd_step(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                           const DeviceStepState& device, const SgdParams& p) {
  const cuda::KernelArg buf = momentum_buf.defined() ? kernel_arg(momentum_buf) : cuda::KernelArg{};
  cuda::launch_sgd_step(activate(param.device().index()), kernel_arg(param), kernel_arg(grad), buf,
                        flags_of(device), p);
}

void CudaBackend::adam_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                            const Tensor& v, const DeviceStepState& device, const AdamParams& p) {
  cuda::launch_adam_step(activate(param.device().index()), kernel_arg(param), kernel_arg(grad),
                         kernel_arg(m), kernel_arg(v), flags_of(device), p);
}

void CudaBackend::unscale_grad(const Tensor& grad, const Tensor& inv_scale,
                               const Tensor& found_inf) {
  cuda::launch_unscale_grad(activate(grad.device().index()), kernel_arg(grad),
                            static_cast<const float*>(kernel_arg(inv_scale).data),
                            static_cast<float*>(kernel_arg(found_inf).data));
}

}  // namespace tessera::detail
