#pragma once
/// Loss functions, computed on the device of their inputs.
#include "tessera/export.h"
#include "tessera/tensor.h"

namespace tessera::nn {

/// How per-example losses combine: their mean (a 0-dim tensor), their sum, or none (one
/// loss per example).
enum class Reduction { kMean, kSum, kNone };

/// Cross-entropy of logits [N, C] (floating; half logits give a float32 loss) against class
/// indices [N] (any integer
/// dtype) on the same device, fused with a numerically stable log-softmax: one kernel
/// forward, one backward. A class index outside [0, C) is not checked on the host (that
/// would wait for the device): its example's loss is NaN, and so is the mean, and its
/// gradient row is NaN (a step on it fails loudly, not with a meaningless finite slope).
TESSERA_API Tensor cross_entropy(const Tensor& logits, const Tensor& targets,
                                 Reduction reduction = Reduction::kMean);

/// Squared error (input - target)^2; input and target of one shape (ShapeError otherwise:
/// a silent broadcast here is a common bug).
TESSERA_API Tensor mse_loss(const Tensor& input, const Tensor& target,
                            Reduction reduction = Reduction::kMean);

}  // namespace tessera::nn
