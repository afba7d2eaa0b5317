// Front end of the fused cross-entropy: checks, a stable log-softmax and the per-sample
// losses in one kernel (and their mean or sum), and its backward in one more.
#include "autograd/record.h"
#include "core/check.h"
#include "core/device_rules.h"
#include "core/tensor_impl.h"
#include "ops/fused_ops.h"
#include "tessera/autograd.h"
#include "tessera/ops.h"

namespace tessera::detail {

Tensor cross_entropy_loss(const Tensor& logits, const Tensor& targets, LossReduction reduction) {
  const Device device =
      common_device("cross_entropy", {{"logits", &logits}, {"targets", &targets}});
  TESSERA_CHECK(
      is_floating(logits.dtype()), DtypeError,
      "[cross_entropy] logits must be floating (float32, float64, bfloat16 or float16), got {}",
      dtype_name(logits.dtype()));
  TESSERA_CHECK(!is_floating(targets.dtype()) && targets.dtype() != kBool, DtypeError,
                "[cross_entropy] targets are class indices and must be an integer dtype, got {}",
                dtype_name(targets.dtype()));
  TESSERA_CHECK(logits.dim() == 2 && logits.size(1) > 0, ShapeError,
                "[cross_entropy] logits must be [batch, classes] with classes > 0, got shape {}; "
                "flatten other dims into the batch first",
                logits.shape().str());
  TESSERA_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0), ShapeError,
                "[cross_entropy] targets must be [batch] = [{}] to match logits {}, got shape {}",
                logits.size(0), logits.shape().str(), targets.shape().str());
  // Through contiguous() (recorded when logits need grad), so the kernel sees rows. Half
  // logits go through a recorded cast: the losses are float32, the gradient the logits'.
  const Tensor x = is_half(logits.dtype()) ? logits.to(kFloat32) : logits.contiguous();
  Tensor t;
  {
    NoGradGuard no_grad;
    t = targets.dtype() == kInt64 ? targets.contiguous() : targets.to(kInt64);
  }
  const std::int64_t n = x.size(0), c = x.size(1);
  Tensor losses = make_output({n}, x.dtype(), device, "cross_entropy");
  Tensor probs = make_output({n, c}, x.dtype(), device, "cross_entropy");
  backend_of(device).cross_entropy(x, t, losses, probs);
  Tensor out = losses;
  if (reduction != LossReduction::kNone) {
    NoGradGuard no_grad;  // the one node below stands for the reduction too
    out = reduction == LossReduction::kMean ? mean(losses) : sum(losses);
  }
  if (needs_grad(x)) {
    // A mean's gradient reaches every sample divided by n inside the kernel: no [n] copy of
    // the one value and no division of its own, two kernels fewer in every training step.
    const double divisor = reduction == LossReduction::kMean ? static_cast<double>(n) : 1.0;
    record("cross_entropy", out, {&x},
           [probs, t, n, divisor](const Tensor& grad) {
             Tensor g = make_output(probs.shape(), probs.dtype(), probs.device(),
                                    "cross_entropy_backward");
             Tensor grad_losses = grad.dtype() == probs.dtype() ? grad : grad.to(probs.dtype());
             if (grad_losses.dim() == 0) grad_losses = grad_losses.expand({n});  // a view
             backend_of(probs.device()).cross_entropy_backward(probs, t, grad_losses, divisor, g);
             return std::vector<Tensor>{g};
           },
           {{"targets", &t}});
  }
  return out;
}

}  // namespace tessera::detail
