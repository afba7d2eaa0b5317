#pragma once
// The math of each elementwise op, written once for every backend and dtype.
#include <cmath>
#include <type_traits>

#include "backend/backend.h"
#include "backend/philox.h"

namespace tessera::detail {

// int32 and int64 arithmetic wraps as PyTorch's does, through unsigned math: signed overflow
// (INT_MAX + 1, -INT_MIN) is undefined in C++. Narrower integers and bool promote to int and
// wrap in the conversion back; floating types compute as written.
template <typename T>
inline constexpr bool kWrapsSigned =
    std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) >= sizeof(int);
template <typename T>
TESSERA_HOST_DEVICE T add_wrapping(T a, T b) {
  if constexpr (kWrapsSigned<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return static_cast<T>(a + b);
  }
}
template <typename T>
TESSERA_HOST_DEVICE T sub_wrapping(T a, T b) {
  if constexpr (kWrapsSigned<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
  } else {
    return static_cast<T>(a - b);
  }
}
template <typename T>
TESSERA_HOST_DEVICE T mul_wrapping(T a, T b) {
  if constexpr (kWrapsSigned<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return static_cast<T>(a * b);
  }
}
template <typename T>
TESSERA_HOST_DEVICE T neg_wrapping(T x) {  // -x, not 0 - x: -(+0.0) is -0.0
  if constexpr (kWrapsSigned<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(U(0) - static_cast<U>(x));
  } else {
    return static_cast<T>(-x);
  }
}

#define TESSERA_UNARY_FN(Name, expr)              \
  struct Name {                                   \
    template <typename T>                         \
    TESSERA_HOST_DEVICE T operator()(T x) const { \
      return expr;                                \
    }                                             \
  };

TESSERA_UNARY_FN(NegFn, neg_wrapping(x))
TESSERA_UNARY_FN(ExpFn, static_cast<T>(std::exp(x)))
TESSERA_UNARY_FN(LogFn, static_cast<T>(std::log(x)))
TESSERA_UNARY_FN(SqrtFn, static_cast<T>(std::sqrt(x)))
// + 0 makes -0.0 (not below 0) +0.0, as fabs does; integers and NaN pass unchanged.
TESSERA_UNARY_FN(AbsFn, static_cast<T>(x < T(0) ? neg_wrapping(x) : x + T(0)))
// NaN stays NaN (x != x), as in PyTorch and IEEE max(x, 0): a diverging net must show it.
TESSERA_UNARY_FN(ReluFn, static_cast<T>((x != x || x > T(0)) ? x : T(0)))
TESSERA_UNARY_FN(SigmoidFn, static_cast<T>(T(1) / (T(1) + std::exp(-x))))
TESSERA_UNARY_FN(TanhFn, static_cast<T>(std::tanh(x)))
#undef TESSERA_UNARY_FN

#define TESSERA_BINARY_FN(Name, expr)                     \
  struct Name {                                           \
    template <typename T>                                 \
    TESSERA_HOST_DEVICE auto operator()(T a, T b) const { \
      return expr;                                        \
    }                                                     \
  };

TESSERA_BINARY_FN(AddFn, add_wrapping(a, b))
TESSERA_BINARY_FN(SubFn, sub_wrapping(a, b))
TESSERA_BINARY_FN(MulFn, mul_wrapping(a, b))
TESSERA_BINARY_FN(DivFn, static_cast<T>(a / b))
// Integers by squaring, wrapping on overflow as integer multiplication does: std::pow goes
// through double, which rounds results past 2^53 (and on CUDA may be an ulp low, which the
// truncation to an integer makes a wrong integer). A negative exponent gives 1 / a^|b|
// truncated toward zero, as PyTorch's kernels do (0 for 0 and |a| > 1); pow() refuses a
// negative scalar exponent for integers before any kernel runs.
struct PowFn {
  template <typename T>
  TESSERA_HOST_DEVICE auto operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if constexpr (std::is_signed_v<T>) {
        if (b < 0) {
          if (a == 1) return T(1);
          if (a == -1) return static_cast<T>((b & 1) ? -1 : 1);
          return T(0);
        }
      }
      using U = std::make_unsigned_t<T>;
      U result = 1, base = static_cast<U>(a);
      for (U e = static_cast<U>(b); e != 0; e >>= 1) {
        if (e & 1) result = static_cast<U>(result * base);
        base = static_cast<U>(base * base);
      }
      return static_cast<T>(result);
    } else {
      return static_cast<T>(std::pow(a, b));
    }
  }
};
// NaN propagates through maximum/minimum, as in NumPy and PyTorch.
TESSERA_BINARY_FN(MaximumFn, static_cast<T>((a != a || a > b) ? a : b))
TESSERA_BINARY_FN(MinimumFn, static_cast<T>((a != a || a < b) ? a : b))
TESSERA_BINARY_FN(EqFn, a == b)
TESSERA_BINARY_FN(NeFn, a != b)
TESSERA_BINARY_FN(LtFn, a < b)
TESSERA_BINARY_FN(LeFn, a <= b)
TESSERA_BINARY_FN(GtFn, a > b)
TESSERA_BINARY_FN(GeFn, a >= b)
// Gradients of the activations, fused: fn(grad, saved) with saved the op's input (ReLU) or
// output (sigmoid, tanh). See Backend::unary_backward.
// ReLU passes the gradient where its input is not <= 0: at a NaN input too, as PyTorch's
// threshold_backward (the forward keeps the NaN, so its slope is not 0).
TESSERA_BINARY_FN(ReluGradFn, static_cast<T>(b <= T(0) ? T(0) : a))
TESSERA_BINARY_FN(SigmoidGradFn, static_cast<T>(a * b * (T(1) - b)))
TESSERA_BINARY_FN(TanhGradFn, static_cast<T>(a * (T(1) - b * b)))
#undef TESSERA_BINARY_FN

// Whether unary_backward has a fused kernel for `op`, and which tensor it saves.
constexpr bool has_fused_backward(UnaryOp op) {
  return op == UnaryOp::kRelu || op == UnaryOp::kSigmoid || op == UnaryOp::kTanh;
}
constexpr bool backward_saves_output(UnaryOp op) { return op != UnaryOp::kRelu; }

// Calls f(functor) with the gradient functor of an op with has_fused_backward(op).
template <typename F>
decltype(auto) dispatch_unary_backward(UnaryOp op, F&& f) {
  if (op == UnaryOp::kSigmoid) return f(SigmoidGradFn{});
  if (op == UnaryOp::kTanh) return f(TanhGradFn{});
  return f(ReluGradFn{});
}

// Calls f(functor) with the functor of `op`.
template <typename F>
decltype(auto) dispatch_unary(UnaryOp op, F&& f) {
  switch (op) {
    case UnaryOp::kNeg:
      return f(NegFn{});
    case UnaryOp::kExp:
      return f(ExpFn{});
    case UnaryOp::kLog:
      return f(LogFn{});
    case UnaryOp::kSqrt:
      return f(SqrtFn{});
    case UnaryOp::kAbs:
      return f(AbsFn{});
    case UnaryOp::kRelu:
      return f(ReluFn{});
    case UnaryOp::kSigmoid:
      return f(SigmoidFn{});
    case UnaryOp::kTanh:
      return f(TanhFn{});
  }
  return f(NegFn{});
}

template <typename F>
decltype(auto) dispatch_binary(BinaryOp op, F&& f) {
  switch (op) {
    case BinaryOp::kAdd:
      return f(AddFn{});
    case BinaryOp::kSub:
      return f(SubFn{});
    case BinaryOp::kMul:
      return f(MulFn{});
    case BinaryOp::kDiv:
      return f(DivFn{});
    case BinaryOp::kPow:
      return f(PowFn{});
    case BinaryOp::kMaximum:
      return f(MaximumFn{});
    case BinaryOp::kMinimum:
      return f(MinimumFn{});
    case BinaryOp::kEq:
      return f(EqFn{});
    case BinaryOp::kNe:
      return f(NeFn{});
    case BinaryOp::kLt:
      return f(LtFn{});
    case BinaryOp::kLe:
      return f(LeFn{});
    case BinaryOp::kGt:
      return f(GtFn{});
    case BinaryOp::kGe:
      return f(GeFn{});
  }
  return f(AddFn{});
}

}  // namespace tessera::detail
