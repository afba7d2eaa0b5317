// Front end of the fused layer normalization: one kernel forward, one or two backward (as
// Note [Fused batch normalization] in batch_norm.cpp says of batch normalization: the ops
// that made it up cost a pass over x each, and the host a call each).
#include "autograd/record.h"
#include "core/check.h"
#include "core/tensor_impl.h"
#include "ops/fused_ops.h"
#include "tessera/autograd.h"

namespace tessera::detail {

Tensor fused_layer_norm(const Tensor& x, int normalized_dims, const Tensor& weight,
                        const Tensor& bias, double eps) {
  constexpr const char* kOp = "layer_norm";
  const Device device = x.device();
  const Dtype dtype = x.dtype();
  TESSERA_INTERNAL_ASSERT(dtype == kFloat32 || dtype == kFloat64,
                          "fused layer_norm takes float32 or float64, got {}", dtype_name(dtype));
  std::int64_t rows = 1;
  for (int d = 0; d < x.dim() - normalized_dims; ++d) rows *= x.size(d);
  // Contiguous inputs for the kernels; recorded (x, weight and bias may need grad).
  const Tensor input = x.contiguous();
  const Tensor w = weight.defined() ? weight.contiguous() : weight;
  const Tensor b = bias.defined() ? bias.contiguous() : bias;
  Tensor y = make_output(x.shape(), dtype, device, kOp);
  Tensor save_mean = make_output({rows}, dtype, device, kOp);
  Tensor save_invstd = make_output({rows}, dtype, device, kOp);
  if (x.numel() > 0) {
    backend_of(device).layer_norm(input, w, b, eps, y, save_mean, save_invstd);
  }
  if (needs_grad({&input, &w, &b})) {
    const bool need_x = input.requires_grad();
    const bool need_w = w.defined() && w.requires_grad();
    const bool need_b = b.defined() && b.requires_grad();
    record(kOp, y, {&input, &w, &b},
           [x = input.detach(), w = w.defined() ? w.detach() : w,
            param_shape = w.defined()   ? w.shape()
                          : b.defined() ? b.shape()
                                        : Shape(),
            save_mean, save_invstd, need_x, need_w, need_b](const Tensor& grad) {
             const Device d = x.device();
             constexpr const char* kBackward = "layer_norm_backward";
             Tensor dx = need_x ? make_output(x.shape(), x.dtype(), d, kBackward) : Tensor();
             Tensor dw = need_w ? make_output(param_shape, x.dtype(), d, kBackward) : Tensor();
             Tensor db = need_b ? make_output(param_shape, x.dtype(), d, kBackward) : Tensor();
             if (x.numel() == 0) {  // nothing to sum: zero gradients for the parameters
               if (need_w) dw.zero_();
               if (need_b) db.zero_();
               return std::vector<Tensor>{dx, dw, db};
             }
             const Tensor g = grad.dtype() == x.dtype() ? grad.contiguous() : grad.to(x.dtype());
             backend_of(d).layer_norm_backward(x, w, g, save_mean, save_invstd, dx, dw, db);
             return std::vector<Tensor>{dx, dw, db};
           },
           {{"input", &input}, {"weight", need_x && w.defined() ? &w : nullptr}});
  }
  return y;
}

}  // namespace tessera::detail
