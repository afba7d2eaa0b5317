// The CUDA backend's optimizer steps: each passes its tensors to a launcher on the
// parameter's device stream (kernels_optim.cu). Nothing here waits.
#include "backend/cuda/cuda_backend.h"

namespace tessera::detail {

void CudaBackend::sgd_step(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                           const SgdParams& p) {
  const cuda::KernelArg buf = momentum_buf.defined() ? kernel_arg(momentum_buf) : cuda::KernelArg{};
  cuda::launch_sgd_step(activate(param.device().index()), kernel_arg(param), kernel_arg(grad), buf,
                        p);
}

void CudaBackend::adam_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                            const Tensor& v, const Tensor& step, const AdamParams& p) {
  const double* t = step.defined() ? static_cast<const double*>(kernel_arg(step).data) : nullptr;
  cuda::launch_adam_step(activate(param.device().index()), kernel_arg(param), kernel_arg(grad),
                         kernel_arg(m), kernel_arg(v), t, p);
}

}  // namespace tessera::detail
