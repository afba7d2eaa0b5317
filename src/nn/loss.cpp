// Losses: the fused cross-entropy front end, and MSE composed from ops.
#include "tessera/nn/loss.h"

#include "autograd/record.h"
#include "backend/backend.h"
#include "core/check.h"
#include "core/device_rules.h"
#include "core/tensor_impl.h"
#include "tessera/autograd.h"
#include "tessera/operators.h"
#include "tessera/ops.h"

namespace tessera::nn {
namespace {

Tensor reduce(const Tensor& losses, Reduction reduction) {
  switch (reduction) {
    case Reduction::kMean:
      return mean(losses);
    case Reduction::kSum:
      return sum(losses);
    case Reduction::kNone:
      return losses;
  }
  return losses;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, Reduction reduction) {
  const Device device =
      detail::common_device("cross_entropy", {{"logits", &logits}, {"targets", &targets}});
  TESSERA_CHECK(is_floating(logits.dtype()), DtypeError,
                "[cross_entropy] logits must be floating (float32 or float64), got {}",
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
  // Through contiguous() (recorded when logits need grad), so the kernel sees rows.
  const Tensor x = logits.contiguous();
  Tensor t;
  {
    NoGradGuard no_grad;
    t = targets.dtype() == kInt64 ? targets.contiguous() : targets.to(kInt64);
  }
  const std::int64_t n = x.size(0), c = x.size(1);
  Tensor losses = detail::make_tensor({n}, x.dtype(), device, "cross_entropy");
  Tensor probs = detail::make_tensor({n, c}, x.dtype(), device, "cross_entropy");
  detail::backend_of(device).cross_entropy(x, t, losses, probs);
  if (detail::needs_grad(x)) {
    detail::record("cross_entropy", losses, {&x}, [probs, t](const Tensor& grad) {
      Tensor g = detail::make_tensor(probs.shape(), probs.dtype(), probs.device(),
                                     "cross_entropy_backward");
      const Tensor grad_losses = grad.dtype() == probs.dtype() ? grad.contiguous()
                                                                : grad.to(probs.dtype());
      detail::backend_of(probs.device()).cross_entropy_backward(probs, t, grad_losses, g);
      return std::vector<Tensor>{g};
    }, {{"targets", &t}});
  }
  return reduce(losses, reduction);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  detail::common_device("mse_loss", {{"input", &input}, {"target", &target}});
  TESSERA_CHECK(input.shape() == target.shape(), ShapeError,
                "[mse_loss] input {} and target {} must have the same shape (no broadcasting "
                "here: it usually hides a bug); reshape one of them",
                input.shape().str(), target.shape().str());
  const Tensor d = input - target;
  return reduce(d * d, reduction);
}

}  // namespace tessera::nn
