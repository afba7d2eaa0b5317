#pragma once
// Fused ops that the layers above (autograd, nn, optim) call instead of the backend: each
// goes through the device rule (core/device_rules.h), checks shapes and dtypes, marks what
// it writes in place, and only then queues one kernel. No host wait in any of them.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "tessera/tensor.h"

namespace tessera::detail {

// The gradient of activation `op` (has_fused_backward, elementwise_functors.h) from the
// gradient of its output and `saved` (the op's output for kSigmoid and kTanh, its input
// otherwise), in saved's dtype.
Tensor activation_backward(UnaryOp op, const Tensor& grad, const Tensor& saved);

// How a loss reduces its per-sample values (nn::Reduction, for the layers below nn).
enum class LossReduction : std::uint8_t { kNone, kMean, kSum };

// Cross-entropy of logits [N, C] against integer class indices [N]: the per-sample losses,
// or their mean or sum, recorded for backward as one node when logits need grad (its
// backward is one kernel, which divides the mean's gradient itself). A target outside
// [0, C) gives a NaN loss.
Tensor cross_entropy_loss(const Tensor& logits, const Tensor& targets, LossReduction reduction);

// Batch normalization of x [N, C, ...] in one kernel each way (Backend::batch_norm, Note
// [Fused batch normalization] in batch_norm.cpp): x float32 or float64, every defined
// per-channel tensor [C] of x's dtype on x's device (the caller, nn::batch_norm, has checked
// all of it); running statistics updated in place in training. Recorded for backward when
// x, weight or bias need grad.
Tensor fused_batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Tensor& running_mean, const Tensor& running_var,
                        const BatchNormParams& p);

// Layer normalization over the last `normalized_dims` dims of x in one kernel forward and
// one or two backward (Backend::layer_norm): x float32 or float64, weight and bias of those
// dims' shape (or undefined), of x's dtype on x's device (checked by the caller,
// nn::layer_norm). Recorded for backward when x, weight or bias need grad.
Tensor fused_layer_norm(const Tensor& x, int normalized_dims, const Tensor& weight,
                        const Tensor& bias, double eps);

// Names one parameter of an optimizer in errors: "[SGD.step] ... parameter 3 ...".
struct ParamSite {
  const char* op;  // "SGD.step"
  std::size_t index;
};

// The SGD steps of several parameters of an optimizer (`indices` names them in errors,
// "[SGD.step] ... parameter 3 ..."), each in place from its grad (converted to its
// parameter's dtype when it differs); half parameters step in float32 and are rounded back
// once. Every tensor of a step must be on its parameter's device (DeviceMismatchError) and
// the state of its parameter's dtype and shape; all are checked before any step is queued.
// The steps of each device and dtype are queued together (one Backend::sgd_steps); each
// step's `queued` entry is set once it is queued, so that a caller catching a failure part
// of the way keeps the state of the steps that were.
void sgd_steps(const char* op, std::span<const std::size_t> indices, std::span<const SgdStep> steps,
               const SgdParams& p, std::span<char> queued);
// The same for Adam/AdamW (exp_avg and exp_avg_sq updated in place).
void adam_steps(const char* op, std::span<const std::size_t> indices,
                std::span<const AdamStep> steps, std::span<char> queued);

// The checks of one parameter's sgd_steps / adam_steps alone, launching nothing (undefined state:
// the state a first step will make, on param's device). Optimizers run them over every parameter
// before stepping any, so a refused step leaves every parameter and its state as they were (Note [A
// step refused before any update], optimizer.h).
void check_sgd_step(const ParamSite& site, const Tensor& param, const Tensor& grad,
                    const Tensor& momentum_buf, const DeviceStepState& device);
void check_adam_step(const ParamSite& site, const Tensor& param, const Tensor& grad,
                     const Tensor& exp_avg, const Tensor& exp_avg_sq,
                     const DeviceStepState& device);

// a @ b for 2-D half a [m, k] and b [k, n] of one dtype (either may be a transposed view),
// in float32: the float32 sums of exact products, not yet rounded to the half type, for a
// layer that adds its bias before the one rounding (nn::Linear under autocast). The backend
// multiplies the half operands themselves where it can (Backend::matmul_takes_half), else
// float32 copies of them. Not recorded for autograd.
Tensor half_product_float32(const Tensor& a, const Tensor& b);

// Parameter `site.index`'s grad *= inv_scale in place, and found_inf = 1 when any of its
// elements was infinite or NaN: one pass, no host wait (GradScaler::unscale_). inv_scale and
// found_inf are float32 0-dim tensors; all three on one device (DeviceMismatchError).
void unscale_grad(const ParamSite& site, const Tensor& grad, const Tensor& inv_scale,
                  const Tensor& found_inf);

}  // namespace tessera::detail
