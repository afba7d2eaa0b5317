// Front end of the elementwise ops: device rule, dtype promotion, broadcasting, then the
// backend kernel. See Note [Scalar promotion].
#include <cmath>
#include <limits>
#include <optional>

#include "autograd/formulas.h"
#include "autograd/record.h"
#include "backend/backend.h"
#include "core/check.h"
#include "core/device_rules.h"
#include "core/dispatch.h"
#include "core/scalar_range.h"
#include "core/tensor_impl.h"
#include "ops/broadcast.h"
#include "ops/fused_ops.h"
#include "ops/half_compute.h"
#include "tessera/autograd.h"
#include "tessera/factories.h"
#include "tessera/ops.h"

// Note [Scalar promotion]
// A Scalar (scalar.h) remembers whether it was written as an integer: as in PyTorch, an
// integer scalar keeps an integer tensor's dtype (a bool tensor's becomes int64) and a
// floating one makes it float32. When C++ scalars all arrived as double, a whole 128.0 kept
// a uint8 image's dtype and `image - 128.0` wrapped. where() with a scalar follows the same
// rule. A bool scalar keeps a bool tensor bool (mask * false). Comparisons go by the value
// instead (the result is bool either way): a whole value compares exactly in the integer
// dtype (int64 2^53 + 1 == 2^53.0 is false), one outside the dtype has one answer for every
// element (uint8 < 256), a finite fractional one as the whole value on its side
// (integer_against_fraction: x < 2.5 is x <= 2, exact where float32 was not). An integer
// scalar past 2^53 (which a double rounds) reaches the kernels as a 0-dim tensor of the
// tensor's dtype.

namespace tessera {
using detail::BinaryOp;
using detail::UnaryOp;

namespace {

bool is_arithmetic(BinaryOp op) { return !detail::is_comparison(op); }

void check_bool_arithmetic(BinaryOp op, Dtype dtype, const char* name) {
  TESSERA_CHECK(dtype != kBool || op == BinaryOp::kAdd || op == BinaryOp::kMul ||
                    op == BinaryOp::kMaximum || op == BinaryOp::kMinimum || !is_arithmetic(op),
                DtypeError,
                "[{}] is not defined for bool tensors; convert them with .to(kInt64) or "
                ".to(kFloat32) first",
                name);
}

// An in-place result must be storable in self as PyTorch's can_cast allows: no floating
// result into an integer tensor, no integer result into a bool one (add_ became OR).
void check_inplace_result(const char* name, Dtype result, Dtype self) {
  TESSERA_CHECK(is_floating(self) || !is_floating(result), DtypeError,
                "[{}] the result is {} but self is {}; in-place ops cannot narrow a floating "
                "result into an integer tensor. Use the out-of-place form",
                name, dtype_name(result), dtype_name(self));
  TESSERA_CHECK(self != kBool || result == kBool, DtypeError,
                "[{}] the result is {} but self is bool; in-place ops cannot narrow it into a "
                "bool tensor. Use the out-of-place form",
                name, dtype_name(result));
}

Dtype compute_dtype(BinaryOp op, Dtype promoted) {
  if ((op == BinaryOp::kDiv) && !is_floating(promoted)) return kFloat32;
  return promoted;
}

// `by_value`: comparisons (Note [Scalar promotion]).
Dtype scalar_dtype(Dtype t, Scalar s, bool by_value) {
  if (is_floating(t)) return t;
  const double v = s.value();
  const bool whole = v == std::floor(v) && std::isfinite(v);
  if (by_value ? !whole : !s.integral()) return kFloat32;
  if (t == kBool && !by_value && s.kind() == Scalar::Kind::kBoolean) return kBool;  // mask * false
  return t == kBool ? kInt64 : t;
}

// An integer scalar a double cannot hold (past 2^53: a hash constant, INT64_MAX) goes to an
// integer tensor's op as a 0-dim tensor of that dtype, which keeps every bit; nullopt for
// every other scalar (its double is exact).
std::optional<Tensor> exact_integer_operand(const char* name, const Tensor& t, Scalar s) {
  constexpr std::int64_t kExact = std::int64_t{1} << 53;
  if (!s.exact_integer() || is_floating(t.dtype()) || t.dtype() == kBool) return std::nullopt;
  if (s.integer() >= -kExact && s.integer() <= kExact) return std::nullopt;
  detail::check_integer_fits(name, s.integer(), t.dtype());
  return tensor({s.integer()}, {t.dtype(), t.device()}).reshape({});
}

// A comparison of an integer tensor with a whole value outside its dtype has one answer for
// every element (uint8 < 256: all true): nullopt otherwise.
std::optional<bool> comparison_outside_range(BinaryOp op, Dtype dtype, double s) {
  if (!detail::is_comparison(op) || is_floating(dtype)) return std::nullopt;
  double lowest = 0, highest = 1;
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    lowest = static_cast<double>(std::numeric_limits<T>::lowest());
    highest = static_cast<double>(std::numeric_limits<T>::max());
  });
  // int64's bounds round to +-2^63 in a double: a value there is outside too, or equal to
  // INT64_MIN, which exact_integer_operand handles first.
  const bool above = s > highest || (dtype == kInt64 && s >= 0x1p63);
  const bool below = s < lowest;
  if (!above && !below) return std::nullopt;
  switch (op) {
    case BinaryOp::kEq:
      return false;
    case BinaryOp::kNe:
      return true;
    case BinaryOp::kLt:
    case BinaryOp::kLe:
      return above;
    default:  // kGt, kGe
      return below;
  }
}

// Whether an op whose result is `out_dtype` runs on its half operands as they are: the
// backend takes them (Note [Half elementwise] in cpu_elementwise.cpp), every operand is
// contiguous, of that dtype and of the first one's shape (no broadcasting), and the result
// is that dtype too (not a comparison's bool).
bool dense_half(Dtype out_dtype, std::initializer_list<const Tensor*> operands, Device device) {
  const Tensor& first = **operands.begin();
  for (const Tensor* t : operands) {
    if (t->dtype() != out_dtype || !t->is_contiguous() || t->shape() != first.shape()) {
      return false;
    }
  }
  return detail::backend_of(device).dense_half_elementwise();
}

Tensor binary_op(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  const Device device = detail::common_device(name, a, b);
  const detail::TensorImpl& ai = detail::impl_of(a);
  const detail::TensorImpl& bi = detail::impl_of(b);
  const Dtype dtype = compute_dtype(op, promote_types(ai.dtype, bi.dtype));
  check_bool_arithmetic(op, dtype, name);
  const Dtype out_dtype = detail::is_comparison(op) ? kBool : dtype;
  if (is_half(dtype)) [[unlikely]] {  // Note [Half precision]
    const bool grad = detail::needs_grad({&a, &b});
    Tensor out;
    if (out_dtype == dtype && ai.dtype == dtype && bi.dtype == dtype &&
        detail::backend_of(device).dense_half_elementwise()) {
      // Operands of the result's half dtype, broadcast or strided: the backend takes them too.
      const Shape shape = detail::broadcast_shapes(name, ai.shape, bi.shape);
      out = detail::make_output(shape, dtype, device, name);
      NoGradGuard internal;
      detail::backend_of(device).binary(op, detail::prepare_operand(a, dtype, shape),
                                        detail::prepare_operand(b, dtype, shape), out);
    } else {
      NoGradGuard internal;
      out = binary_op(op, name, detail::to_float32(a), detail::to_float32(b)).to(out_dtype);
    }
    if (grad) detail::record_binary(op, name, a, b, out);
    return out;
  }
  detail::Backend& backend = detail::backend_of(device);
  if (ai.dtype == dtype && bi.dtype == dtype && ai.shape == bi.shape) {
    // The common case, kept free of handle copies: it bounds the per-op overhead.
    Tensor out = detail::make_output(ai.shape, out_dtype, device, name);
    backend.binary(op, a, b, out);
    if (ai.autograd || bi.autograd) [[unlikely]] {
      if (detail::needs_grad({&a, &b})) detail::record_binary(op, name, a, b, out);
    }
    return out;
  }
  const Shape shape = detail::broadcast_shapes(name, ai.shape, bi.shape);
  Tensor out = detail::make_output(shape, out_dtype, device, name);
  const bool grad = detail::needs_grad({&a, &b});
  {
    NoGradGuard internal;  // dtype conversion and broadcasting are part of this op's formula
    backend.binary(op, detail::prepare_operand(a, dtype, shape),
                   detail::prepare_operand(b, dtype, shape), out);
  }
  if (grad) detail::record_binary(op, name, a, b, out);
  return out;
}

Tensor scalar_op(BinaryOp op, const char* name, const Tensor& a, Scalar scalar, bool scalar_first);

// An integer (or bool) tensor against a finite fractional value, compared exactly: by the
// whole value on the same side of it (x < 2.5 is x <= 2, x == 2.5 is false), in the tensor's
// dtype. In float32, int64 16777217 == 16777216.5 was true. nullopt for other comparisons.
std::optional<Tensor> integer_against_fraction(BinaryOp op, const char* name, const Tensor& a,
                                               double s, bool scalar_first) {
  // (Comparisons take the tensor first: lt(x, 2.5), x < 2.5; no op compares s < x.)
  if (!detail::is_comparison(op) || scalar_first || is_floating(a.dtype()) || !std::isfinite(s) ||
      s == std::floor(s)) {
    return std::nullopt;
  }
  switch (op) {
    case BinaryOp::kEq:
    case BinaryOp::kNe:
      return full(a.shape(), op == BinaryOp::kNe ? 1.0 : 0.0, {kBool, a.device()});
    case BinaryOp::kLt:
    case BinaryOp::kLe:
      return scalar_op(BinaryOp::kLe, name, a, std::floor(s), false);
    default:  // kGt, kGe
      return scalar_op(BinaryOp::kGe, name, a, std::ceil(s), false);
  }
}

Tensor scalar_op(BinaryOp op, const char* name, const Tensor& a, Scalar scalar, bool scalar_first) {
  detail::check_defined(a, name);
  if (auto exact = integer_against_fraction(op, name, a, scalar.value(), scalar_first)) {
    return *std::move(exact);
  }
  const Dtype dtype = compute_dtype(op, scalar_dtype(a.dtype(), scalar, detail::is_comparison(op)));
  const double s = scalar.value();
  // (An int64 scalar always fits an int64 tensor: its double may round to 2^63.)
  if (!(scalar.exact_integer() && dtype == kInt64)) {
    if (const auto answer = comparison_outside_range(op, dtype, s)) {
      return full(a.shape(), *answer ? 1.0 : 0.0, {kBool, a.device()});
    }
  }
  if (const auto exact = exact_integer_operand(name, a, scalar)) {
    return scalar_first ? binary_op(op, name, *exact, a) : binary_op(op, name, a, *exact);
  }
  // An exponent float32 does not hold (16777217 became even, 1e-50 became 0) is applied in
  // float64, and the result rounded once.
  if (op == BinaryOp::kPow && is_floating(dtype) && dtype != kFloat64 && std::isfinite(s) &&
      static_cast<double>(static_cast<float>(s)) != s) [[unlikely]] {
    return scalar_op(op, name, a.to(kFloat64), scalar, scalar_first).to(dtype);
  }
  check_bool_arithmetic(op, dtype, name);
  detail::check_scalar_fits_integer(name, s, dtype);
  const bool grad = detail::needs_grad(a);
  if (is_half(dtype)) [[unlikely]] {  // Note [Half precision]
    Tensor out;
    if (!detail::is_comparison(op) && dense_half(dtype, {&a}, a.device())) {
      out = detail::make_output(a.shape(), dtype, a.device(), name);
      detail::backend_of(a.device()).binary_scalar(op, a, s, scalar_first, out);
    } else {
      NoGradGuard internal;
      // A comparison sees the scalar as the tensor's dtype holds it (as float32 tensors do):
      // full({1}, 0.1, kBFloat16) == 0.1.
      const double v = detail::is_comparison(op) ? detail::stored_value(s, dtype) : s;
      out = scalar_op(op, name, detail::to_float32(a), v, scalar_first)
                .to(detail::is_comparison(op) ? kBool : dtype);
    }
    if (grad) detail::record_binary_scalar(op, name, a, s, scalar_first, out);
    return out;
  }
  Tensor out =
      detail::make_output(a.shape(), detail::is_comparison(op) ? kBool : dtype, a.device(), name);
  {
    NoGradGuard internal;
    const Tensor x = a.dtype() == dtype ? a : a.to(dtype);
    detail::backend_of(a.device()).binary_scalar(op, x, s, scalar_first, out);
  }
  if (grad) detail::record_binary_scalar(op, name, a, s, scalar_first, out);
  return out;
}

Tensor unary_op(UnaryOp op, const char* name, const Tensor& a, bool float_only) {
  detail::check_defined(a, name);
  Dtype dtype = a.dtype();
  if (float_only && !is_floating(dtype)) dtype = kFloat32;
  TESSERA_CHECK(dtype != kBool, DtypeError,
                "[{}] is not defined for bool tensors; convert with .to(kInt64) or .to(kFloat32)",
                name);
  const bool grad = detail::needs_grad(a);
  Tensor out;
  if (is_half(dtype) && dense_half(dtype, {&a}, a.device())) [[unlikely]] {
    out = detail::make_output(a.shape(), dtype, a.device(), name);
    detail::backend_of(a.device()).unary(op, a, out);
  } else if (is_half(dtype)) [[unlikely]] {  // Note [Half precision]
    NoGradGuard internal;
    out = unary_op(op, name, detail::to_float32(a), float_only).to(dtype);
  } else {
    out = detail::make_output(a.shape(), dtype, a.device(), name);
    NoGradGuard internal;
    const Tensor x = a.dtype() == dtype ? a : a.to(dtype);
    detail::backend_of(a.device()).unary(op, x, out);
  }
  if (grad) detail::record_unary(op, name, a, out);
  return out;
}

// GELU and SiLU refuse integers, as PyTorch's kernels do (its GELU kernel has no Long
// version), where sigmoid promotes them: a network's activations are floating anyway.
Tensor floating_activation(UnaryOp op, const char* name, const Tensor& a) {
  detail::check_defined(a, name);
  TESSERA_CHECK(is_floating(a.dtype()), DtypeError,
                "[{}] is not defined for {} tensors; convert with .to(kFloat32)", name,
                dtype_name(a.dtype()));
  return unary_op(op, name, a, true);
}

// self (op)= other, computed in the promoted dtype and rounded once into self's, as PyTorch
// does: a float32 self times a float64 1e-50 rounded the operand to 0 first.
Tensor& inplace_op(BinaryOp op, const char* name, Tensor& self, const Tensor& other) {
  const Device device = detail::common_device(name, self, other);
  detail::check_inplace(name, {&self, &other});
  detail::check_writable(self, name);
  const Dtype promoted = compute_dtype(op, promote_types(self.dtype(), other.dtype()));
  check_inplace_result(name, promoted, self.dtype());
  check_bool_arithmetic(op, self.dtype(), name);
  TESSERA_CHECK(detail::broadcast_shapes(name, self.shape(), other.shape()) == self.shape(),
                ShapeError,
                "[{}] other's shape {} does not broadcast to self's shape {} (an in-place result "
                "keeps self's shape)",
                name, other.shape().str(), self.shape().str());
  // An operand that overlaps self in another layout (a.add_(a.t())), or a part of it that
  // broadcasts over it (a.sub_(a.narrow(0, 0, 1)): same strides and offset, but row 0 is read
  // again after it was written), is read from a copy, so no element is read after it was
  // overwritten. Only self itself, element for element, is read in place.
  Tensor src = other;
  if (other.shares_storage(self) &&
      !(other.shape() == self.shape() && other.strides() == self.strides() &&
        other.storage_offset() == self.storage_offset())) {
    src = other.clone();
  }
  // A half self computes in float32 (Note [Half precision]), or wider when other is; a
  // floating self computes in other's dtype when that is wider.
  const Dtype compute =
      is_half(self.dtype()) ? compute_dtype(op, promote_types(kFloat32, promoted)) : promoted;
  if (compute != self.dtype() && is_floating(compute)) [[unlikely]] {
    NoGradGuard internal;
    const Tensor x = self.to(compute);
    const Tensor y = detail::prepare_operand(src, compute, self.shape());
    Tensor r = detail::make_output(self.shape(), compute, device, name);
    detail::backend_of(device).binary(op, x, y, r);
    detail::store_converted(r, self);
  } else {
    const Tensor y = detail::prepare_operand(src, self.dtype(), self.shape());
    detail::backend_of(device).binary(op, self, y, self);
  }
  detail::mark_written(self);  // once nothing can refuse the write (record.h)
  return self;
}

Tensor& inplace_scalar(BinaryOp op, const char* name, Tensor& self, Scalar scalar) {
  detail::check_defined(self, name);
  if (const auto exact = exact_integer_operand(name, self, scalar)) {
    return inplace_op(op, name, self, *exact);
  }
  detail::check_inplace(name, {&self});
  detail::check_writable(self, name);
  check_inplace_result(name, compute_dtype(op, scalar_dtype(self.dtype(), scalar, false)),
                       self.dtype());
  const double s = scalar.value();
  check_bool_arithmetic(op, self.dtype(), name);
  detail::check_scalar_fits_integer(name, s, self.dtype());  // t.mul_(1e30): undefined
  if (is_half(self.dtype())) [[unlikely]] {                  // Note [Half precision]
    NoGradGuard internal;
    const Tensor x = detail::to_float32(self);
    Tensor r = detail::make_output(self.shape(), kFloat32, self.device(), name);
    detail::backend_of(self.device()).binary_scalar(op, x, s, false, r);
    detail::store_converted(r, self);
  } else {
    detail::backend_of(self.device()).binary_scalar(op, self, s, false, self);
  }
  detail::mark_written(self);  // once nothing can refuse the write (record.h)
  return self;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kAdd, "add", a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kSub, "sub", a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kMul, "mul", a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kDiv, "div", a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kPow, "pow", a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) {
  return binary_op(BinaryOp::kMaximum, "maximum", a, b);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return binary_op(BinaryOp::kMinimum, "minimum", a, b);
}
Tensor add(const Tensor& a, Scalar b) { return scalar_op(BinaryOp::kAdd, "add", a, b, false); }
Tensor sub(const Tensor& a, Scalar b) { return scalar_op(BinaryOp::kSub, "sub", a, b, false); }
Tensor sub(Scalar a, const Tensor& b) { return scalar_op(BinaryOp::kSub, "sub", b, a, true); }
Tensor mul(const Tensor& a, Scalar b) { return scalar_op(BinaryOp::kMul, "mul", a, b, false); }
Tensor div(const Tensor& a, Scalar b) { return scalar_op(BinaryOp::kDiv, "div", a, b, false); }
Tensor div(Scalar a, const Tensor& b) { return scalar_op(BinaryOp::kDiv, "div", b, a, true); }
Tensor pow(const Tensor& a, Scalar e) {
  detail::check_defined(a, "pow", "self");
  TESSERA_CHECK(e.value() >= 0 || is_floating(scalar_dtype(a.dtype(), e, false)), DtypeError,
                "[pow] an {} tensor to the power {} is not an integer; convert it first, as in "
                "pow(x.to(kFloat32), {}), or give a floating exponent ({}.0)",
                dtype_name(a.dtype()), e.value(), e.value(), e.value());
  return scalar_op(BinaryOp::kPow, "pow", a, e, false);
}
Tensor maximum(const Tensor& a, Scalar b) {
  return scalar_op(BinaryOp::kMaximum, "maximum", a, b, false);
}
Tensor minimum(const Tensor& a, Scalar b) {
  return scalar_op(BinaryOp::kMinimum, "minimum", a, b, false);
}

Tensor eq(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kEq, "eq", a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kNe, "ne", a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kLt, "lt", a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kLe, "le", a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kGt, "gt", a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kGe, "ge", a, b); }
Tensor eq(const Tensor& a, Scalar b) { return scalar_op(BinaryOp::kEq, "eq", a, b, false); }
Tensor ne(const Tensor& a, Scalar b) { return scalar_op(BinaryOp::kNe, "ne", a, b, false); }
Tensor lt(const Tensor& a, Scalar b) { return scalar_op(BinaryOp::kLt, "lt", a, b, false); }
Tensor le(const Tensor& a, Scalar b) { return scalar_op(BinaryOp::kLe, "le", a, b, false); }
Tensor gt(const Tensor& a, Scalar b) { return scalar_op(BinaryOp::kGt, "gt", a, b, false); }
Tensor ge(const Tensor& a, Scalar b) { return scalar_op(BinaryOp::kGe, "ge", a, b, false); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const Device device =
      detail::common_device("where", {{"condition", &cond}, {"self", &a}, {"other", &b}});
  TESSERA_CHECK(cond.dtype() == kBool, DtypeError,
                "[where] condition must be bool, got {}; build it with a comparison such as "
                "x > 0",
                dtype_name(cond.dtype()));
  const Dtype dtype = promote_types(a.dtype(), b.dtype());
  const Shape shape = detail::broadcast_shapes(
      "where", cond.shape(), detail::broadcast_shapes("where", a.shape(), b.shape()));
  const Dtype kernel_dtype = is_half(dtype) ? kFloat32 : dtype;  // Note [Half precision]
  Tensor out = detail::make_output(shape, kernel_dtype, device, "where");
  const bool grad = detail::needs_grad({&a, &b});
  {
    NoGradGuard internal;
    detail::backend_of(device).where(detail::prepare_operand(cond, kBool, shape),
                                     detail::prepare_operand(a, kernel_dtype, shape),
                                     detail::prepare_operand(b, kernel_dtype, shape), out);
    out = out.to(dtype);
  }
  if (grad) detail::record_where(cond, a, b, out);
  return out;
}

// The scalar promotes as in arithmetic (Note [Scalar promotion]): where(c, int64, 0.0) is
// float32, where(c, bool, 2) int64.
Tensor where(const Tensor& cond, const Tensor& a, Scalar scalar) {
  const double b = scalar.value();
  detail::check_defined(a, "where", "self");
  detail::check_defined(cond, "where", "condition");
  if (const auto exact = exact_integer_operand("where", a, scalar)) return where(cond, a, *exact);
  // Before the scalar becomes a tensor on self's device, which a mismatch would then blame.
  detail::common_device("where", {{"condition", &cond}, {"self", &a}});
  const Dtype dtype = scalar_dtype(a.dtype(), scalar, false);
  detail::check_scalar_fits("where", b, dtype);  // named where, not full
  return where(cond, a, full({}, b, {dtype, a.device()}));
}

Tensor where(const Tensor& cond, Scalar scalar, const Tensor& b) {
  const double a = scalar.value();
  detail::check_defined(b, "where", "other");
  detail::check_defined(cond, "where", "condition");
  if (const auto exact = exact_integer_operand("where", b, scalar)) return where(cond, *exact, b);
  detail::common_device("where", {{"condition", &cond}, {"other", &b}});
  const Dtype dtype = scalar_dtype(b.dtype(), scalar, false);
  detail::check_scalar_fits("where", a, dtype);
  return where(cond, full({}, a, {dtype, b.device()}), b);
}

Tensor neg(const Tensor& a) { return unary_op(UnaryOp::kNeg, "neg", a, false); }
Tensor exp(const Tensor& a) { return unary_op(UnaryOp::kExp, "exp", a, true); }
Tensor log(const Tensor& a) { return unary_op(UnaryOp::kLog, "log", a, true); }
Tensor sqrt(const Tensor& a) { return unary_op(UnaryOp::kSqrt, "sqrt", a, true); }
Tensor abs(const Tensor& a) { return unary_op(UnaryOp::kAbs, "abs", a, false); }
Tensor relu(const Tensor& a) { return unary_op(UnaryOp::kRelu, "relu", a, false); }
Tensor sigmoid(const Tensor& a) { return unary_op(UnaryOp::kSigmoid, "sigmoid", a, true); }
Tensor tanh(const Tensor& a) { return unary_op(UnaryOp::kTanh, "tanh", a, true); }
Tensor gelu(const Tensor& a, GeluApproximation approximate) {
  const bool by_tanh = approximate == GeluApproximation::kTanh;
  return floating_activation(by_tanh ? UnaryOp::kGeluTanh : UnaryOp::kGelu, "gelu", a);
}
Tensor silu(const Tensor& a) { return floating_activation(UnaryOp::kSilu, "silu", a); }

Tensor& Tensor::add_(const Tensor& o) { return inplace_op(BinaryOp::kAdd, "add_", *this, o); }
Tensor& Tensor::sub_(const Tensor& o) { return inplace_op(BinaryOp::kSub, "sub_", *this, o); }
Tensor& Tensor::mul_(const Tensor& o) { return inplace_op(BinaryOp::kMul, "mul_", *this, o); }
Tensor& Tensor::div_(const Tensor& o) { return inplace_op(BinaryOp::kDiv, "div_", *this, o); }
Tensor& Tensor::add_(Scalar v) { return inplace_scalar(BinaryOp::kAdd, "add_", *this, v); }
Tensor& Tensor::sub_(Scalar v) { return inplace_scalar(BinaryOp::kSub, "sub_", *this, v); }
Tensor& Tensor::mul_(Scalar v) { return inplace_scalar(BinaryOp::kMul, "mul_", *this, v); }
Tensor& Tensor::div_(Scalar v) { return inplace_scalar(BinaryOp::kDiv, "div_", *this, v); }

namespace {

// fill_ and zero_, each naming itself.
Tensor& fill_named(Tensor& self, double value, const char* op) {
  detail::check_defined(self, op);
  detail::check_scalar_fits(op, value, self.dtype());
  detail::check_inplace(op, {&self});
  detail::check_writable(self, op);
  const Device device = self.device();
  if (is_half(self.dtype())) [[unlikely]] {  // Note [Half precision]
    Tensor value32 = detail::make_output({}, kFloat32, device, op);
    detail::backend_of(device).fill(value32, detail::stored_value(value, self.dtype()));
    detail::store_converted(value32.expand(self.shape()), self);
  } else {
    detail::backend_of(device).fill(self, value);
  }
  detail::mark_written(self);  // once nothing can refuse the write (record.h)
  return self;
}

}  // namespace

Tensor& Tensor::fill_(double value) { return fill_named(*this, value, "fill_"); }

Tensor& Tensor::zero_() { return fill_named(*this, 0, "zero_"); }

}  // namespace tessera

namespace tessera::detail {

Tensor activation_backward(UnaryOp op, const Tensor& grad, const Tensor& saved) {
  common_device("activation_backward", {{"grad", &grad}, {"saved", &saved}});
  TESSERA_INTERNAL_ASSERT(grad.shape() == saved.shape() && is_floating(saved.dtype()),
                          "activation_backward got grad {} for saved {} {}", grad.shape().str(),
                          dtype_name(saved.dtype()), saved.shape().str());
  if (is_half(saved.dtype()) && grad.dtype() == saved.dtype() && grad.is_contiguous() &&
      saved.is_contiguous() && backend_of(saved.device()).dense_half_elementwise()) [[unlikely]] {
    Tensor grad_in = make_output(saved.shape(), saved.dtype(), saved.device(), "backward");
    backend_of(saved.device()).unary_backward(op, grad, saved, grad_in);
    return grad_in;
  }
  if (is_half(saved.dtype())) [[unlikely]] {  // Note [Half precision]
    NoGradGuard internal;
    return activation_backward(op, to_float32(grad), to_float32(saved)).to(saved.dtype());
  }
  const Tensor g = grad.dtype() == saved.dtype() ? grad.contiguous() : grad.to(saved.dtype());
  Tensor grad_in = make_output(saved.shape(), saved.dtype(), saved.device(), "backward");
  backend_of(saved.device()).unary_backward(op, g, saved.contiguous(), grad_in);
  return grad_in;
}

}  // namespace tessera::detail
