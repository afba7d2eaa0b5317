// Losses: cross-entropy on the fused op (ops/cross_entropy.cpp), MSE composed from ops.
#include "tessera/nn/loss.h"

#include "core/check.h"
#include "core/device_rules.h"
#include "ops/fused_ops.h"
#include "ops/half_compute.h"
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
  using detail::LossReduction;
  const LossReduction r = reduction == Reduction::kMean  ? LossReduction::kMean
                          : reduction == Reduction::kSum ? LossReduction::kSum
                                                         : LossReduction::kNone;
  return detail::cross_entropy_loss(logits, targets, r);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  detail::common_device("mse_loss", {{"input", &input}, {"target", &target}});
  TESSERA_CHECK(input.shape() == target.shape(), ShapeError,
                "[mse_loss] input {} and target {} must have the same shape (no broadcasting "
                "here: it usually hides a bug); reshape one of them",
                input.shape().str(), target.shape().str());
  TESSERA_CHECK(is_floating(input.dtype()) && is_floating(target.dtype()), DtypeError,
                "[mse_loss] needs floating input and target, got {} and {}; convert them with "
                ".to(kFloat32)",
                dtype_name(input.dtype()), dtype_name(target.dtype()));
  // Under autocast a loss runs in float32 (as PyTorch's autocast casts mse_loss's inputs):
  // half differences and squares rounded each lost the loss's digits.
  // Only the half operands widen: a float64 one stays float64, and promotion does the rest.
  const auto widened = [](const Tensor& t) {
    return detail::autocast_keeps_float32(t) ? t.to(kFloat32) : t;
  };
  const Tensor d = widened(input) - widened(target);
  return reduce(d * d, reduction);
}

}  // namespace tessera::nn
