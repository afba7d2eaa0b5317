// Losses: cross-entropy on the fused op (ops/cross_entropy.cpp), MSE composed from ops.
#include "tessera/nn/loss.h"

#include "core/check.h"
#include "core/device_rules.h"
#include "ops/fused_ops.h"
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
  return reduce(detail::cross_entropy_losses(logits, targets), reduction);
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
