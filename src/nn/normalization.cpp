// batch_norm, layer_norm and their layers.
#include "tessera/nn/normalization.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/code_names.h"
#include "core/device_rules.h"
#include "core/tensor_impl.h"
#include "nn/layer_input.h"
#include "ops/fused_ops.h"
#include "ops/half_compute.h"
#include "tessera/autocast.h"
#include "tessera/autograd.h"
#include "tessera/operators.h"
#include "tessera/ops.h"

// Note [Normalization kernels]
// batch_norm and layer_norm are one kernel forward and one (two for layer_norm's parameters)
// backward on every backend (Note [Fused batch normalization] in ops/batch_norm.cpp); the
// code here checks shapes, devices and dtypes. The kernels compute in float32 or float64: a
// half input (under autocast, or a half model) is widened to float32 through a recorded cast,
// so its gradient comes back in its dtype, and the result is narrowed back to the input's
// dtype, as PyTorch's CPU and CUDA kernels return it.

namespace tessera::nn {
namespace {

// Refuses a tensor of `name` that is not on x's device (the device rules' message).
void check_same_device(const char* op, const Tensor& x, const Tensor& t, const char* name) {
  if (t.defined()) detail::common_device(op, {{"input", &x}, {name, &t}});
}

// Refuses a defined per-feature tensor whose shape is not `expected` (the weight, bias or a
// running statistic).
void check_shape(const char* op, const Tensor& t, const char* name, const Shape& expected,
                 const char* of_what) {
  TESSERA_CHECK(!t.defined() || t.shape() == expected, ShapeError,
                "[{}] {} has shape {} but must be {} ({}); build it with that shape", op, name,
                t.shape().str(), expected.str(), of_what);
}

// The dtype the op computes in: x's, or float32 for a half x under autocast. Every defined
// tensor of `others` must be of x's dtype, or (under autocast) float32 or x's dtype.
Dtype compute_dtype(const char* op, const Tensor& x,
                    std::initializer_list<std::pair<const char*, const Tensor*>> others) {
  TESSERA_CHECK(is_floating(x.dtype()), DtypeError,
                "[{}] normalizes floating inputs, got {}; convert the input with .to(kFloat32)", op,
                dtype_name(x.dtype()));
  const bool widen = is_half(x.dtype()) && autocast_dtype(x.device().kind()).has_value();
  for (const auto& [name, t] : others) {
    if (!t->defined()) continue;
    const bool fits = t->dtype() == x.dtype() || (widen && t->dtype() == kFloat32);
    TESSERA_CHECK(fits, DtypeError,
                  "[{}] the input is {} but {} is {}; give them one dtype (convert the input "
                  "with .to({}), or the model), or run under autocast with float32 parameters",
                  op, dtype_name(x.dtype()), name, dtype_name(t->dtype()),
                  detail::dtype_code(t->dtype()));
  }
  return widen ? kFloat32 : x.dtype();
}

// Whether x's last dims are `last` (layer_norm's and LayerNorm's check).
bool ends_with(const Tensor& x, const Shape& last) {
  const int k = last.size();
  bool fits = x.dim() >= k;
  for (int i = 0; fits && i < k; ++i) fits = x.size(x.dim() - k + i) == last[i];
  return fits;
}

Tensor in_dtype(const Tensor& t, Dtype dtype) {
  return !t.defined() || t.dtype() == dtype ? t : t.to(dtype);
}

void check_eps(const char* op, double eps) {
  TESSERA_CHECK(std::isfinite(eps) && eps >= 0, Error,
                "[{}] eps is added to the variance and must be finite and >= 0, got {}", op, eps);
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  constexpr const char* kOp = "batch_norm";
  detail::check_defined(x, kOp, "input");
  for (const auto& [t, name] : {std::pair{&running_mean, "running_mean"},
                                {&running_var, "running_var"},
                                {&weight, "weight"},
                                {&bias, "bias"}}) {
    check_same_device(kOp, x, *t, name);
  }
  TESSERA_CHECK(x.dim() >= 2, ShapeError,
                "[{}] the input must be [N, C, ...] (2 dims or more), got shape {}", kOp,
                x.shape().str());
  const std::int64_t channels = x.size(1);
  const Shape per_feature({channels});
  const std::string of_what = fmt::format("one value per channel of input {}", x.shape().str());
  check_shape(kOp, running_mean, "running_mean", per_feature, of_what.c_str());
  check_shape(kOp, running_var, "running_var", per_feature, of_what.c_str());
  check_shape(kOp, weight, "weight", per_feature, of_what.c_str());
  check_shape(kOp, bias, "bias", per_feature, of_what.c_str());
  TESSERA_CHECK(running_mean.defined() == running_var.defined(), Error,
                "[{}] running_mean and running_var go together: pass both or neither", kOp);
  TESSERA_CHECK(training || running_mean.defined(), Error,
                "[{}] evaluation (training = false) normalizes by running_mean and "
                "running_var, which are undefined; pass them, or training = true to normalize "
                "by the batch's statistics",
                kOp);
  TESSERA_CHECK(momentum >= 0 && momentum <= 1, Error,
                "[{}] momentum is the batch's weight in the running statistics, in [0, 1]; got "
                "{}",
                kOp, momentum);
  check_eps(kOp, eps);
  TESSERA_CHECK(!training || eps > 0, Error,
                "[{}] training divides by sqrt(var + eps), and a channel whose values in the "
                "batch are all equal has variance 0, so eps must be > 0 in training; got {} "
                "(the default is 1e-5)",
                kOp, eps);
  const Dtype dtype = compute_dtype(kOp, x,
                                    {{"running_mean", &running_mean},
                                     {"running_var", &running_var},
                                     {"weight", &weight},
                                     {"bias", &bias}});
  const std::int64_t per_channel = channels == 0 ? 0 : x.numel() / channels;
  TESSERA_CHECK(!training || per_channel != 1, ShapeError,
                "[{}] training normalizes each channel by its batch's mean and variance, which "
                "needs more than 1 value per channel; input {} has 1. Train with batches of 2 "
                "or more on each device (in data-parallel training each device gets its share "
                "of a batch: drop a short last batch with LoaderOptions::drop_last, tessera "
                "train --drop-last), or call eval() on the model to use the running statistics",
                kOp, x.shape().str());

  // The kernels compute in float32 or float64: a half x (and half parameters) in float32
  // copies, through recorded casts, so gradients come back in each tensor's dtype.
  const Dtype kernel_dtype = is_half(dtype) ? kFloat32 : dtype;
  const Tensor input = in_dtype(x, kernel_dtype);
  const Tensor w = in_dtype(weight, kernel_dtype);
  const Tensor b = in_dtype(bias, kernel_dtype);
  // Running statistics of another dtype (a half model's), or strided ones (columns of one
  // tensor, say) that the kernels would read as [C], are updated in copies, stored back.
  const auto fits = [&](const Tensor& t) {
    return !t.defined() || (t.dtype() == kernel_dtype && t.is_contiguous());
  };
  const auto kernel_copy = [&](const Tensor& t) {
    NoGradGuard no_grad;
    return fits(t) ? t : t.to(kernel_dtype).contiguous();
  };
  const Tensor mean = kernel_copy(running_mean), var = kernel_copy(running_var);
  const Tensor y = detail::fused_batch_norm(
      input, w, b, mean, var, {.training = training, .momentum = momentum, .eps = eps});
  if (training) {
    if (!fits(running_mean)) detail::store_converted(mean, running_mean);
    if (!fits(running_var)) detail::store_converted(var, running_var);
  }
  return in_dtype(y, x.dtype());
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  constexpr const char* kOp = "layer_norm";
  detail::check_defined(x, kOp, "input");
  check_same_device(kOp, x, weight, "weight");
  check_same_device(kOp, x, bias, "bias");
  const int k = normalized_shape.size();
  TESSERA_CHECK(k >= 1 && ends_with(x, normalized_shape), ShapeError,
                "[{}] normalized_shape {} must be 1 dim or more and equal the input's last dims; "
                "input has shape {}",
                kOp, normalized_shape.str(), x.shape().str());
  const std::string of_what = fmt::format("normalized_shape {}", normalized_shape.str());
  check_shape(kOp, weight, "weight", normalized_shape, of_what.c_str());
  check_shape(kOp, bias, "bias", normalized_shape, of_what.c_str());
  check_eps(kOp, eps);
  const Dtype dtype = compute_dtype(kOp, x, {{"weight", &weight}, {"bias", &bias}});

  // The kernels compute in float32 or float64 (Note [Normalization kernels]).
  const Dtype kernel_dtype = is_half(dtype) ? kFloat32 : dtype;
  const Tensor y =
      detail::fused_layer_norm(in_dtype(x, kernel_dtype), k, in_dtype(weight, kernel_dtype),
                               in_dtype(bias, kernel_dtype), eps);
  return in_dtype(y, x.dtype());
}

namespace {

void check_features(const char* layer, std::int64_t features) {
  TESSERA_CHECK(features > 0, ShapeError, "[{}] num_features must be positive, got {}", layer,
                features);
}

// A parameter or buffer of `shape` filled with `value`, made by `layer`.
Tensor filled(const char* layer, const Shape& shape, double value, TensorOptions options) {
  TESSERA_CHECK(!options.dtype || is_floating(*options.dtype), DtypeError,
                "[{}] parameters and running statistics are floating-point, got dtype {}; make "
                "the layer float32 (the default), float64 or a half type",
                layer, dtype_name(*options.dtype));
  return full(shape, value, options);
}

// num_batches_tracked: a 0-dim int64 zero on the options' device.
Tensor counter_on(TensorOptions options) {
  options.dtype = kInt64;
  return zeros({}, options);
}

}  // namespace

BatchNorm::BatchNorm(const char* type_name, std::int64_t features, BatchNormOptions norm_options,
                     TensorOptions options, std::initializer_list<int> ranks)
    : Module(type_name),
      num_features((check_features(type_name, features), features)),
      norm(norm_options),
      running_mean(norm.track_running_stats
                       ? register_buffer("running_mean", filled(type_name, {features}, 0, options))
                       : Tensor()),
      running_var(norm.track_running_stats
                      ? register_buffer("running_var", filled(type_name, {features}, 1, options))
                      : Tensor()),
      num_batches_tracked(norm.track_running_stats
                              ? register_buffer("num_batches_tracked", counter_on(options))
                              : Tensor()),
      ranks_(ranks) {
  TESSERA_CHECK(norm.momentum >= 0 && norm.momentum <= 1, Error,
                "[{}] momentum is the batch's weight in the running statistics, in [0, 1]; got "
                "{}",
                type_name, norm.momentum);
  check_eps(type_name, norm.eps);
  if (norm.affine) {
    weight = register_parameter("weight", filled(type_name, {features}, 1, options));
    bias = register_parameter("bias", filled(type_name, {features}, 0, options));
  }
}

Tensor BatchNorm::forward(const Tensor& x) {
  detail::check_defined(x, type_name().c_str(), "input");
  std::string shapes;
  for (const int r : ranks_) {
    shapes += fmt::format("{}{}", shapes.empty() ? "" : " or ",
                          r == 2   ? "[N, C]"
                          : r == 3 ? "[N, C, L]"
                                   : "[N, C, H, W]");
  }
  TESSERA_CHECK(std::ranges::find(ranks_, x.dim()) != ranks_.end(), ShapeError,
                "[{}] {} takes inputs {}, got shape {}", type_name(), path(), shapes,
                x.shape().str());
  TESSERA_CHECK(x.size(1) == num_features, ShapeError,
                "[{}] {} has num_features={} but the input has {} channels (dim 1 of shape {})",
                type_name(), path(), num_features, x.size(1), x.shape().str());
  constexpr UnderAutocast kRule = UnderAutocast::kWidensHalfInput;
  if (weight.defined()) check_input_dtype(*this, x, weight.dtype(), kRule);
  if (running_mean.defined()) check_input_dtype(*this, x, running_mean.dtype(), kRule);
  // norm is public: checked again here, where the message can name the layer.
  TESSERA_CHECK(norm.momentum >= 0 && norm.momentum <= 1, Error,
                "[{}] {} has norm.momentum={}; it is the batch's weight in the running "
                "statistics, in [0, 1]",
                type_name(), path(), norm.momentum);
  // Without running statistics the batch's are used in evaluation too (PyTorch's rule).
  const bool batch_stats = is_training() || !running_mean.defined();
  // A batch's variance may be 0: then eps is all that keeps the division finite.
  TESSERA_CHECK(std::isfinite(norm.eps) && (norm.eps > 0 || (norm.eps == 0 && !batch_stats)), Error,
                "[{}] {} has norm.eps={}; it is added to the variance and must be finite and "
                "{} (the default is 1e-5)",
                type_name(), path(), norm.eps,
                batch_stats ? "> 0 when the batch's statistics are used" : ">= 0");
  const std::int64_t per_channel = num_features == 0 ? 0 : x.numel() / num_features;
  TESSERA_CHECK(
      !batch_stats || per_channel != 1, ShapeError,
      "[{}] {} normalizes each channel by its batch's mean and variance{}, which needs "
      "more than 1 value per channel; input {} has 1. {}",
      type_name(), path(), is_training() ? "" : " in eval() too (it keeps no running statistics)",
      x.shape().str(),
      is_training() ? "Train with batches of 2 or more on each device (in data-parallel training "
                      "each device gets its share of a batch: drop a short last batch with "
                      "LoaderOptions::drop_last, tessera train --drop-last), or call eval() on "
                      "the model to use the running statistics"
                    : "Evaluate batches of 2 or more, or make the layer with "
                      "track_running_stats = true to keep running statistics for eval()");
  Tensor y =
      batch_norm(x, running_mean, running_var, weight, bias, batch_stats, norm.momentum, norm.eps);
  if (is_training() && num_batches_tracked.defined()) {
    NoGradGuard no_grad;
    Tensor(num_batches_tracked).add_(1);
  }
  return y;
}

std::string BatchNorm::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", num_features,
                     norm.eps, norm.momentum, norm.affine, norm.track_running_stats);
}

LayerNorm::LayerNorm(Shape shape, double eps_value, bool elementwise_affine, TensorOptions options)
    : Module("LayerNorm"), normalized_shape(shape), eps(eps_value) {
  bool positive = shape.size() >= 1;
  for (const std::int64_t d : shape) positive = positive && d > 0;
  TESSERA_CHECK(positive, ShapeError,
                "[LayerNorm] normalized_shape must have 1 dim or more, each positive; got {}",
                shape.str());
  check_eps("LayerNorm", eps);
  if (elementwise_affine) {
    weight = register_parameter("weight", filled("LayerNorm", shape, 1, options));
    bias = register_parameter("bias", filled("LayerNorm", shape, 0, options));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  detail::check_defined(x, "LayerNorm", "input");
  // layer_norm checks this too, but cannot name the layer.
  TESSERA_CHECK(ends_with(x, normalized_shape), ShapeError,
                "[LayerNorm] {} normalizes over the last dims {}, but the input has shape {}; "
                "give it inputs that end in {}, or make the layer for the input's last dims",
                path(), normalized_shape.str(), x.shape().str(), normalized_shape.str());
  if (weight.defined()) {
    check_input_dtype(*this, x, weight.dtype(), UnderAutocast::kWidensHalfInput);
  }
  return layer_norm(x, normalized_shape, weight, bias, eps);
}

std::string LayerNorm::extra_repr() const {
  return fmt::format("{}, eps={}, elementwise_affine={}", normalized_shape.str(), eps,
                     weight.defined());
}

}  // namespace tessera::nn
