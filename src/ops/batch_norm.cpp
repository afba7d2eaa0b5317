// Front end of the fused batch normalization: one kernel forward, one backward (Note
// [Fused batch normalization]).
#include "autograd/record.h"
#include "core/check.h"
#include "core/tensor_impl.h"
#include "ops/fused_ops.h"
#include "tessera/autograd.h"
#include "tessera/factories.h"

// Note [Fused batch normalization]
// Batch normalization was first written with the ops (means, differences, products): about
// 16 ops forward and as many autograd nodes backward per layer, each a pass over x or a
// host call, which on two logical CPU devices left the host queueing more than the devices
// computed. Now each direction is one backend call: the forward forms each channel's
// statistics (in double), updates the running ones in place and normalizes; the backward
// forms the two per-channel sums the gradients need and then grad_x. What the call saves
// for backward is the mean and 1 / sqrt(var + eps) it used, so a later in-place update of
// the running statistics (the next step's) does not change this step's gradients.

namespace tessera::detail {

Tensor fused_batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Tensor& running_mean, const Tensor& running_var,
                        const BatchNormParams& p) {
  constexpr const char* kOp = "batch_norm";
  const Device device = x.device();
  const Dtype dtype = x.dtype();
  TESSERA_INTERNAL_ASSERT(dtype == kFloat32 || dtype == kFloat64,
                          "fused batch_norm takes float32 or float64, got {}", dtype_name(dtype));
  // Contiguous inputs for the kernels; recorded (x, weight and bias may need grad).
  const Tensor input = x.contiguous();
  const Tensor w = weight.defined() ? weight.contiguous() : weight;
  const Tensor b = bias.defined() ? bias.contiguous() : bias;
  const std::int64_t channels = x.size(1);
  Tensor y = make_output(x.shape(), dtype, device, kOp);
  Tensor save_mean = make_output({channels}, dtype, device, kOp);
  Tensor save_invstd = make_output({channels}, dtype, device, kOp);
  if (x.numel() > 0) {
    if (p.training && running_mean.defined()) {
      mark_written(running_mean);
      mark_written(running_var);
    }
    backend_of(device).batch_norm(input, w, b, running_mean, running_var, y, save_mean, save_invstd,
                                  p);
  }
  if (needs_grad({&input, &w, &b})) {
    const bool need_x = input.requires_grad();
    const bool need_w = w.defined() && w.requires_grad();
    const bool need_b = b.defined() && b.requires_grad();
    record(kOp, y, {&input, &w, &b},
           [x = input.detach(), w = w.defined() ? w.detach() : w, save_mean, save_invstd,
            training = p.training, need_x, need_w, need_b](const Tensor& grad) {
             const Device d = x.device();
             const std::int64_t c = x.size(1);
             Tensor dx =
                 need_x ? make_output(x.shape(), x.dtype(), d, "batch_norm_backward") : Tensor();
             Tensor dw = need_w ? make_output({c}, x.dtype(), d, "batch_norm_backward") : Tensor();
             Tensor db = need_b ? make_output({c}, x.dtype(), d, "batch_norm_backward") : Tensor();
             if (x.numel() == 0) {  // nothing to sum: zero gradients for the parameters
               if (need_w) dw.zero_();
               if (need_b) db.zero_();
               return std::vector<Tensor>{dx, dw, db};
             }
             const Tensor g = grad.dtype() == x.dtype() ? grad.contiguous() : grad.to(x.dtype());
             backend_of(d).batch_norm_backward(x, w, g, save_mean, save_invstd, training, dx, dw,
                                               db);
             return std::vector<Tensor>{dx, dw, db};
           },
           {{"input", &input}, {"weight", need_x && w.defined() ? &w : nullptr}});
  }
  return y;
}

}  // namespace tessera::detail
