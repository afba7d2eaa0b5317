// Initializers: draw on the tensor's device with the factories, then copy in place.
#include "tessera/nn/init.h"

#include <cmath>
#include <utility>

#include "core/check.h"
#include "core/tensor_impl.h"
#include "tessera/autograd.h"
#include "tessera/factories.h"

namespace tessera::nn::init {
namespace {

Tensor& check_floating(Tensor& t, const char* op) {
  detail::check_defined(t, op);
  TESSERA_CHECK(is_floating(t.dtype()), DtypeError,
                "[{}] initializes floating tensors only, got {}", op, dtype_name(t.dtype()));
  return t;
}

Tensor& assign(Tensor& t, const Tensor& value) {
  NoGradGuard no_grad;  // initializing is not part of any graph
  t.copy_(value);
  return t;
}

std::pair<double, double> fans(const Tensor& t, const char* op) {
  TESSERA_CHECK(t.dim() >= 2, ShapeError,
                "[{}] needs a tensor of at least 2 dims ([out, in, ...]) to compute fan-in and "
                "fan-out, got shape {}",
                op, t.shape().str());
  double receptive = 1;
  for (int d = 2; d < t.dim(); ++d) receptive *= static_cast<double>(t.size(d));
  return {static_cast<double>(t.size(1)) * receptive, static_cast<double>(t.size(0)) * receptive};
}

// A gain the caller passed: the error names it, not the bounds uniform() would get from it.
void check_gain(const char* op, const char* name, double value, bool non_negative) {
  TESSERA_CHECK(std::isfinite(value) && (!non_negative || value >= 0), Error,
                "[{}] {} must be a finite number{}, got {}", op, name,
                non_negative ? " >= 0 (0 fills zeros)" : "", value);
}

double kaiming_std(const Tensor& t, double a, FanMode mode, const char* op) {
  const auto [fan_in, fan_out] = fans(t, op);
  const double fan = mode == FanMode::kFanIn ? fan_in : fan_out;
  TESSERA_CHECK(fan > 0, ShapeError, "[{}] fan is 0 for shape {}", op, t.shape().str());
  return std::sqrt(2.0 / (1 + a * a)) / std::sqrt(fan);
}

}  // namespace

Tensor& uniform_(Tensor& t, double low, double high) {
  check_floating(t, "uniform_");
  if (low == high && std::isfinite(low)) {  // as PyTorch's uniform_(a, a): every value a
    NoGradGuard no_grad;
    t.fill_(low);
    return t;
  }
  return assign(t, uniform(t.shape(), low, high, {t.dtype(), t.device()}));
}

Tensor& normal_(Tensor& t, double mean, double stddev) {
  check_floating(t, "normal_");
  return assign(t, normal(t.shape(), mean, stddev, {t.dtype(), t.device()}));
}

Tensor& constant_(Tensor& t, double value) {
  check_floating(t, "constant_");
  NoGradGuard no_grad;
  t.fill_(value);
  return t;
}

Tensor& zeros_(Tensor& t) { return constant_(t, 0); }
Tensor& ones_(Tensor& t) { return constant_(t, 1); }

Tensor& xavier_uniform_(Tensor& t, double gain) {
  check_floating(t, "xavier_uniform_");
  const auto [fan_in, fan_out] = fans(t, "xavier_uniform_");
  check_gain("xavier_uniform_", "gain", gain, true);
  if (t.numel() == 0) return t;  // nothing to fill (as PyTorch; its fans may be 0)
  const double bound = gain * std::sqrt(6.0 / (fan_in + fan_out));
  return uniform_(t, -bound, bound);
}

Tensor& xavier_normal_(Tensor& t, double gain) {
  check_floating(t, "xavier_normal_");
  const auto [fan_in, fan_out] = fans(t, "xavier_normal_");
  check_gain("xavier_normal_", "gain", gain, true);
  if (t.numel() == 0) return t;
  return normal_(t, 0, gain * std::sqrt(2.0 / (fan_in + fan_out)));
}

Tensor& kaiming_uniform_(Tensor& t, double a, FanMode mode) {
  check_floating(t, "kaiming_uniform_");
  (void)fans(t, "kaiming_uniform_");  // the dims check, also for an empty tensor
  check_gain("kaiming_uniform_", "a (the negative slope)", a, false);
  if (t.numel() == 0) return t;  // nothing to fill, fan 0 or not (as PyTorch)
  const double bound = std::sqrt(3.0) * kaiming_std(t, a, mode, "kaiming_uniform_");
  return uniform_(t, -bound, bound);
}

Tensor& kaiming_normal_(Tensor& t, double a, FanMode mode) {
  check_floating(t, "kaiming_normal_");
  (void)fans(t, "kaiming_normal_");
  check_gain("kaiming_normal_", "a (the negative slope)", a, false);
  if (t.numel() == 0) return t;
  return normal_(t, 0, kaiming_std(t, a, mode, "kaiming_normal_"));
}

}  // namespace tessera::nn::init
