// Linear and LazyLinear.
#include "tessera/nn/linear.h"

#include <cmath>

#include "autograd/record.h"
#include "core/check.h"
#include "core/code_names.h"
#include "core/device_rules.h"
#include "core/tensor_impl.h"
#include "nn/layer_input.h"
#include "ops/fused_ops.h"
#include "ops/layer_dtypes.h"
#include "tessera/autocast.h"
#include "tessera/autograd.h"
#include "tessera/operators.h"
#include "tessera/ops.h"

namespace tessera::nn {
namespace {

// The rows a [..., features] tensor folds into: every dim but the last. Counted, not
// inferred (reshape's -1): with 0 features there is nothing to infer it from.
std::int64_t rows_of(Shape shape) {
  shape.erase(shape.size() - 1);
  return shape.numel();
}

void check_features(const char* layer, std::int64_t in, std::int64_t out) {
  TESSERA_CHECK(in > 0 && out > 0, ShapeError,
                "[{}] in_features and out_features must be positive, got {} and {}", layer, in,
                out);
}

// PyTorch's default: kaiming_uniform(a=sqrt(5)) on the weight, which is uniform in
// +-1/sqrt(fan_in), and the same bound for the bias.
Tensor init_uniform(const char* layer, const Shape& shape, std::int64_t fan_in,
                    TensorOptions options) {
  TESSERA_CHECK(!options.dtype || is_floating(*options.dtype), DtypeError,
                "[{}] parameters are floating-point, got dtype {}; make the layer float32 "
                "(the default), float64 or a half type",
                layer, dtype_name(*options.dtype));
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  try {
    return uniform(shape, -bound, bound, options);
  } catch (const OutOfMemoryError& e) {  // named the layer, not the uniform() it calls
    throw OutOfMemoryError(
        fmt::format("[{}] a parameter of shape {}: {}", layer, shape.str(), e.what()));
  }
}

// The dtype autocast runs a linear layer in on these tensors' device, or nullopt: autocast on
// there and every tensor float32 or half (tessera/autocast.h).
std::optional<Dtype> linear_autocast(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const std::optional<Dtype> d = autocast_dtype(x.device().kind());
  const auto castable = [](const Tensor& t) { return t.dtype() == kFloat32 || is_half(t.dtype()); };
  if (!d || !castable(x) || !castable(weight) || (bias.defined() && !castable(bias))) return {};
  return d;
}

Tensor linear_forward(const Module& m, const Tensor& x, const Tensor& weight, const Tensor& bias,
                      std::int64_t in_features) {
  detail::check_defined(x, m.type_name().c_str(), "input");
  TESSERA_CHECK(x.dim() >= 1 && x.size(-1) == in_features, ShapeError,
                "[{}] {} expects inputs whose last dim is in_features={}, got shape {}; flatten "
                "or reshape the input (e.g. with nn::Flatten)",
                m.type_name(), m.path(), in_features, x.shape().str());
  check_input_dtype(m, x, weight.dtype());
  return linear(x, weight, bias);
}

std::string linear_repr(std::int64_t in, std::int64_t out, bool bias) {
  return fmt::format("in_features={}, out_features={}, bias={}", in, out, bias);
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (bias.defined()) {
    detail::common_device("linear", {{"input", &x}, {"weight", &weight}, {"bias", &bias}});
  } else {
    detail::common_device("linear", {{"input", &x}, {"weight", &weight}});
  }
  TESSERA_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1), ShapeError,
                "[linear] input {} and weight {} do not fit: the weight must be [out, in] with "
                "in = the input's last dim",
                x.shape().str(), weight.shape().str());
  const std::int64_t out = weight.size(0), in = weight.size(1);
  TESSERA_CHECK(!bias.defined() || bias.shape() == Shape({out}), ShapeError,
                "[linear] bias {} must be [{}] for weight {}", bias.shape().str(), out,
                weight.shape().str());
  if (const auto ac = linear_autocast(x, weight, bias);
      ac &&
      (x.dtype() != *ac || weight.dtype() != *ac || (bias.defined() && bias.dtype() != *ac))) {
    // Recorded casts: the gradients come back in each tensor's own dtype.
    return linear(x.to(*ac), weight.to(*ac), bias.defined() ? bias.to(*ac) : bias);
  }
  // A bias of another dtype was added (or converted) silently; PyTorch refuses it too.
  detail::check_layer_dtypes("linear", x, weight, bias);
  Shape out_shape(x.shape());
  out_shape[out_shape.size() - 1] = out;
  Tensor x2, y;
  {
    NoGradGuard internal;  // one node for the whole layer, recorded below
    // Rows counted, not inferred: -1 has nothing to go by when `in` is 0.
    x2 = x.dim() == 2 ? x : x.reshape({rows_of(x.shape()), in});
    Tensor y2;
    if (is_half(x.dtype()) && weight.dtype() == x.dtype()) {
      // The product and the bias in float32, rounded once, as a GEMM's epilogue would; the
      // product from the half operands themselves where the backend can.
      const AutocastGuard exact(x.device().kind(), kBFloat16, /*enabled=*/false);
      y2 = detail::half_product_float32(x2, weight.t());
      if (bias.defined()) y2.add_(bias.to(kFloat32));
      y2 = y2.to(x.dtype());
    } else {
      y2 = matmul(x2, weight.t());
      if (bias.defined()) y2.add_(bias);
    }
    y = x.dim() == 2 ? y2 : y2.reshape(out_shape);
  }
  if (detail::needs_grad({&x, &weight, &bias})) {
    const bool need_x = x.requires_grad(), need_w = weight.requires_grad();
    const bool need_b = bias.defined() && bias.requires_grad();
    detail::record("linear", y, {&x, &weight, &bias},
                   [x2 = x2.detach(), w = weight.detach(), x_shape = x.shape(), out, need_x, need_w,
                    need_b](const Tensor& g) {
                     const Tensor g2 = g.reshape({rows_of(g.shape()), out});
                     Tensor dx, dw, db;
                     if (need_x) dx = matmul(g2, w).reshape(x_shape);
                     if (need_w) dw = matmul(g2.t(), x2);  // [out, in], the weight's layout
                     if (need_b) db = sum(g2, {0});
                     return std::vector<Tensor>{dx, dw, db};
                   },
                   {{"input", need_w ? &x2 : nullptr}, {"weight", need_x ? &weight : nullptr}});
  }
  return y;
}

Linear::Linear(std::int64_t in, std::int64_t out, bool with_bias, TensorOptions options)
    : Module("Linear"), in_features(in), out_features(out) {
  check_features("Linear", in, out);
  weight = register_parameter("weight", init_uniform("Linear", {out, in}, in, options));
  if (with_bias) bias = register_parameter("bias", init_uniform("Linear", {out}, in, options));
}

Tensor Linear::forward(const Tensor& x) {
  return linear_forward(*this, x, weight, bias, in_features);
}

std::string Linear::extra_repr() const {
  return linear_repr(in_features, out_features, bias.defined());
}

LazyLinear::LazyLinear(std::int64_t out, bool with_bias)
    : Module("LazyLinear"), out_features(out), has_bias_(with_bias) {
  TESSERA_CHECK(out > 0, ShapeError, "[LazyLinear] out_features must be positive, got {}", out);
}

Tensor LazyLinear::forward(const Tensor& x) {
  if (!built()) {
    detail::check_defined(x, "LazyLinear", "input");
    TESSERA_CHECK(x.dim() >= 1 && x.size(-1) > 0, ShapeError,
                  "[LazyLinear] {} cannot take in_features from an input of shape {}: its last "
                  "dim is the features, and must be at least 1; reshape the input (e.g. with "
                  "nn::Flatten)",
                  path(), x.shape().str());
    // A half input under autocast is autocast's output, not the model's dtype: parameters stay
    // float32 there (autocast.h), as PyTorch's LazyLinear builds them.
    const bool autocast_output = is_half(x.dtype()) && autocast_dtype(x.device().kind());
    const Dtype dtype =
        placed_dtype().value_or(is_floating(x.dtype()) && !autocast_output ? x.dtype() : kFloat32);
    const Device device = placed_device().value_or(x.device());
    const std::int64_t in = x.size(-1);
    // Checked before anything is built, so a failed first call leaves the layer unbuilt.
    TESSERA_CHECK(device == x.device(), DeviceMismatchError,
                  "[LazyLinear] {} was moved to {}, input is on {}; tessera never copies "
                  "implicitly: move the input with x.to({}) or the model with model.to({})",
                  path(), device.str(), x.device().str(), detail::device_code(device),
                  detail::device_code(x.device()));
    check_input_dtype(*this, x, dtype);
    // Both made before either is registered: running out of memory for the bias left a
    // weight registered with in_features 0, and every later call refused the input.
    Tensor w = init_uniform("LazyLinear", {out_features, in}, in, {dtype, device});
    Tensor b =
        has_bias_ ? init_uniform("LazyLinear", {out_features}, in, {dtype, device}) : Tensor();
    weight = register_parameter("weight", std::move(w));
    if (has_bias_) bias = register_parameter("bias", std::move(b));
    in_features = in;
  }
  return linear_forward(*this, x, weight, bias, in_features);
}

std::string LazyLinear::extra_repr() const {
  if (!built())
    return fmt::format("in_features=<lazy>, out_features={}, bias={}", out_features, has_bias_);
  return linear_repr(in_features, out_features, bias.defined());
}

}  // namespace tessera::nn
