#pragma once
// The math of each elementwise op, written once for every backend and dtype.
#include <cmath>
#include <limits>
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

// Note [GELU and SiLU formulas]
// gelu(x) = x Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2, which is PyTorch's
// (1 + erf(x / sqrt 2)) / 2 without its cancellation for negative x (PyTorch's float64
// gelu(-10) is 0; this is -7.6e-23). The tanh form 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x +
// 0.044715 x^3), is computed as x / (1 + e^-2u), the same number without 1 + tanh to
// cancel; silu(x) = x / (1 + e^-x). At x = -inf each is -0, its limit (x * 0 would be NaN,
// which PyTorch gives), at +inf it is inf. Only floating T reaches these (ops/elementwise.cpp);
// halves compute in float32. The CPU's float32 kernels are vector_math.h's, of the same
// formulas. Their gradients, below, are PyTorch's formulas with the same limits at +-inf.
constexpr double kSqrt2OverPi = 0.797884560802865355879892119868763737;  // sqrt(2 / pi)
constexpr double kInvSqrt2Pi = 0.398942280401432677939946059934381868;   // 1 / sqrt(2 pi)
constexpr double kInvSqrt2 = 0.707106781186547524400844362104849039;     // 1 / sqrt 2
constexpr double kGeluTanhCubic = 0.044715;

template <typename T>
TESSERA_HOST_DEVICE T gelu_tanh_inner(T x) {
  return T(kSqrt2OverPi) * (x + T(kGeluTanhCubic) * (x * x * x));
}
// Past |x| = 1e10 a slope is its limit (0 below, 1 above) to the last bit; taking the limit
// there avoids inf * 0 = NaN at +-inf (and where x^2 overflows).
template <typename T>
TESSERA_HOST_DEVICE T slope_or_limit(T x, T slope) {
  return (x > T(1e10)) ? T(1) : (x < T(-1e10)) ? T(0) : slope;
}

// Each is x itself for the integer T the CPU's dtype switch instantiates and never runs.
struct GeluFn {
  template <typename T>
  TESSERA_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (x < T(-1e10)) return -T(0);  // the limit at -inf; the value there underflows
      return x * (T(0.5) * std::erfc(-x * T(kInvSqrt2)));
    } else {
      return x;
    }
  }
};
struct GeluTanhFn {
  template <typename T>
  TESSERA_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (x < T(-1e10)) return -T(0);
      return x / (T(1) + std::exp(T(-2) * gelu_tanh_inner(x)));
    } else {
      return x;
    }
  }
};
struct SiluFn {
  template <typename T>
  TESSERA_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (x < T(-1e10)) return -T(0);
      return x / (T(1) + std::exp(-x));
    } else {
      return x;
    }
  }
};

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
// fn(grad, input) of GELU, its tanh form and SiLU: PyTorch's formulas (Note [GELU and SiLU
// formulas]); the tanh form's 0.5 (1 + tanh u) is sigma = sigmoid(2u), its 1 - tanh^2 u is
// 4 sigma (1 - sigma). Only floating T reaches them (backward runs dispatch_floating).
struct GeluGradFn {
  template <typename T>
  TESSERA_HOST_DEVICE T operator()(T g, T x) const {
    const T cdf = T(0.5) * std::erfc(-x * T(kInvSqrt2));
    const T pdf = T(kInvSqrt2Pi) * std::exp(T(-0.5) * x * x);
    return g * slope_or_limit(x, cdf + x * pdf);
  }
};
struct GeluTanhGradFn {
  template <typename T>
  TESSERA_HOST_DEVICE T operator()(T g, T x) const {
    const T sigma = T(1) / (T(1) + std::exp(T(-2) * gelu_tanh_inner(x)));
    const T inner_slope = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluTanhCubic) * x * x);
    return g * slope_or_limit(x, sigma + T(2) * x * sigma * (T(1) - sigma) * inner_slope);
  }
};
struct SiluGradFn {
  template <typename T>
  TESSERA_HOST_DEVICE T operator()(T g, T x) const {
    const T sigma = T(1) / (T(1) + std::exp(-x));
    return g * slope_or_limit(x, sigma * (T(1) + x * (T(1) - sigma)));
  }
};

// Whether unary_backward has a fused kernel for `op`, and which tensor it saves.
constexpr bool has_fused_backward(UnaryOp op) {
  return op == UnaryOp::kRelu || op == UnaryOp::kSigmoid || op == UnaryOp::kTanh ||
         op == UnaryOp::kGelu || op == UnaryOp::kGeluTanh || op == UnaryOp::kSilu;
}
constexpr bool backward_saves_output(UnaryOp op) {
  return op == UnaryOp::kSigmoid || op == UnaryOp::kTanh;
}

// Calls f(functor) with the gradient functor of an op with has_fused_backward(op).
template <typename F>
decltype(auto) dispatch_unary_backward(UnaryOp op, F&& f) {
  if (op == UnaryOp::kSigmoid) return f(SigmoidGradFn{});
  if (op == UnaryOp::kTanh) return f(TanhGradFn{});
  if (op == UnaryOp::kGelu) return f(GeluGradFn{});
  if (op == UnaryOp::kGeluTanh) return f(GeluTanhGradFn{});
  if (op == UnaryOp::kSilu) return f(SiluGradFn{});
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
    case UnaryOp::kGelu:
      return f(GeluFn{});
    case UnaryOp::kGeluTanh:
      return f(GeluTanhFn{});
    case UnaryOp::kSilu:
      return f(SiluFn{});
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

// Note [pow by a common exponent]
// x^2, x^3, sqrt(x), 1/x and x itself are what pow(x, scalar) is mostly asked for (losses,
// norms, variances), and std::pow per element cost ~100x a multiply on the CPU. They run as
// that arithmetic in the kernels of both backends, so pow's autograd (elementwise_grad.cpp:
// g * s * pow(a, s - 1), which lands here too) is untouched. Each gives std::pow's value up
// to its rounding: x * x, sqrt(x) and 1 / x are correctly rounded (std::pow is within an ulp
// of that on the CPU; a GPU's powf is documented several ulps off, so the CUDA kernel taking
// powf for these failed the CPU-pinned test); a float's cube is computed in double, where
// x * x is exact, and rounded twice (2^-53, then to float); a double's is x * x * x, within
// an ulp, as PyTorch's. sqrt differs from pow(x, 0.5) at two points, taken as pow takes
// them: pow(-0, 0.5) = +0 (sqrt: -0; the + 0 makes it +0) and pow(-inf, 0.5) = +inf (sqrt:
// NaN).
struct PowSquareFn {
  template <typename T>
  TESSERA_HOST_DEVICE T operator()(T x, T) const {
    return static_cast<T>(x * x);
  }
};
struct PowCubeFn {
  template <typename T>
  TESSERA_HOST_DEVICE T operator()(T x, T) const {
    if constexpr (std::is_same_v<T, float>) {
      const double d = x;
      return static_cast<T>(d * d * d);
    } else {
      return static_cast<T>(x * x * x);
    }
  }
};
struct PowHalfFn {
  template <typename T>
  TESSERA_HOST_DEVICE T operator()(T x, T) const {
    return x == -std::numeric_limits<T>::infinity() ? std::numeric_limits<T>::infinity()
                                                    : static_cast<T>(std::sqrt(x) + T(0));
  }
};
struct PowMinusOneFn {
  template <typename T>
  TESSERA_HOST_DEVICE T operator()(T x, T) const {
    return static_cast<T>(T(1) / x);
  }
};
struct PowOneFn {
  template <typename T>
  TESSERA_HOST_DEVICE T operator()(T x, T) const {
    return x;
  }
};

// Calls run(fn) with the functor for exponent `e` (a floating T) and returns true when `e`
// is one of those exponents; false, calling nothing, otherwise.
template <typename T, typename Run>
bool pow_by_common_exponent(T e, Run&& run) {
  if (e == T(2)) {
    run(PowSquareFn{});
  } else if (e == T(3)) {
    run(PowCubeFn{});
  } else if (e == T(0.5)) {
    run(PowHalfFn{});
  } else if (e == T(-1)) {
    run(PowMinusOneFn{});
  } else if (e == T(1)) {
    run(PowOneFn{});
  } else {
    return false;
  }
  return true;
}

}  // namespace tessera::detail
