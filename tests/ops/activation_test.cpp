// gelu (exact and tanh) and silu on every device against float64 references: values over
// the whole range (infinities, NaN, signed zeros, far tails), strided and half inputs, the
// fused gradients, and the integer refusal.
#include <fmt/format.h>

#include <cmath>
#include <functional>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_close;
using testing::expect_throw_with;
using testing::random_values;

class Activation : public DeviceTest {};

constexpr double kSqrt2OverPi = 0.79788456080286535588;

double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }
double gelu_tanh_inner_ref(double x) { return kSqrt2OverPi * (x + 0.044715 * x * x * x); }

struct ActivationCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;    // the value; limits at +-inf
  std::function<double(double)> slope;  // the derivative; limits at +-inf
};

// PyTorch's formulas in float64: gelu x Phi(x) (Phi by erfc, which does not cancel for
// x < 0), its tanh form 0.5 x (1 + tanh u) as x sigmoid(2u) (the same number, without the
// cancellation), silu x sigmoid(x).
const std::vector<ActivationCase>& cases() {
  static const std::vector<ActivationCase> all = {
      {"gelu", [](const Tensor& x) { return gelu(x); },
       [](double x) { return x == -INFINITY ? -0.0 : x * 0.5 * std::erfc(-x / std::sqrt(2.0)); },
       [](double x) {
         if (std::isinf(x)) return x > 0 ? 1.0 : 0.0;
         return 0.5 * std::erfc(-x / std::sqrt(2.0)) +
                x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
       }},
      {"gelu tanh", [](const Tensor& x) { return gelu(x, GeluApproximation::kTanh); },
       [](double x) { return x == -INFINITY ? -0.0 : x * sigmoid_ref(2 * gelu_tanh_inner_ref(x)); },
       [](double x) {
         if (std::isinf(x)) return x > 0 ? 1.0 : 0.0;
         const double s = sigmoid_ref(2 * gelu_tanh_inner_ref(x));
         return s + 2 * x * s * (1 - s) * kSqrt2OverPi * (1 + 3 * 0.044715 * x * x);
       }},
      {"silu", [](const Tensor& x) { return silu(x); },
       [](double x) { return x == -INFINITY ? -0.0 : x * sigmoid_ref(x); },
       [](double x) {
         if (std::isinf(x)) return x > 0 ? 1.0 : 0.0;
         const double s = sigmoid_ref(x);
         return s * (1 + x * (1 - s));
       }},
  };
  return all;
}

// 256 random values in [-8, 8) and 64 from the edges (repeated, so that a vectorized body and
// not only a scalar tail sees each), as a [20, 16] tensor's.
std::vector<double> inputs() {
  std::vector<double> v = random_values(256, 11, -8, 8);
  const std::vector<double> special = {-30, -10, -6, -5, -3,   -1e-3, -0.0,     0.0,       1e-3,
                                       3,   5,   10, 30, 1e20, -1e20, INFINITY, -INFINITY, NAN};
  for (std::size_t i = 0; v.size() < 320; ++i) v.push_back(special[i % special.size()]);
  return v;
}

// float32: a few ulp where the value is well conditioned, absolutely 1e-7 in gelu's far tail
// (Note [Vectorized normal CDF]). float64: libm's erfc and exp, on any device.
double rtol(Dtype dtype) { return dtype == kFloat32 ? 2e-6 : 1e-12; }
double atol(Dtype dtype) { return dtype == kFloat32 ? 1e-7 : 1e-300; }

// expect_close, with an infinite expected value matched exactly (inf - inf is NaN there).
void expect_matches(const Tensor& actual, std::vector<double> expected, double rtol, double atol,
                    const std::string& what) {
  std::vector<double> got = actual.to_vector<double>();
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isinf(expected[i])) continue;
    EXPECT_EQ(got[i], expected[i]) << what << " at " << i;
    got[i] = expected[i] = 0;
  }
  expect_close(got, expected, rtol, atol, what);
}

TEST_P(Activation, ValuesMatchFloat64Reference) {
  const std::vector<double> values = inputs();
  for (Dtype dtype : {kFloat32, kFloat64}) {
    const Tensor x = from_vector(values, {20, 16}, {dtype, device()});
    const std::vector<double> held = x.to_vector<double>();
    for (const ActivationCase& c : cases()) {
      std::vector<double> expected(held.size());
      for (std::size_t i = 0; i < held.size(); ++i) expected[i] = c.ref(held[i]);
      const std::string what = fmt::format("{} {}", c.name, dtype_name(dtype));
      const Tensor y = c.op(x);
      EXPECT_EQ(y.dtype(), dtype) << what;
      expect_matches(y, expected, rtol(dtype), atol(dtype), what);
      // -0 at -0 and at -inf (the limit, not inf * 0 = NaN), +0 at +0.
      const std::vector<double> got = y.to_vector<double>();
      for (std::size_t i = 0; i < held.size(); ++i) {
        if (expected[i] == 0) {
          EXPECT_EQ(std::signbit(got[i]), std::signbit(expected[i]))
              << what << " at " << held[i] << " is " << got[i];
        }
      }
      // Non-contiguous input: the transpose (float32 takes a copy-then-vectorize path).
      expect_matches(c.op(x.t()).t(), expected, rtol(dtype), atol(dtype), what + " (transposed)");
      // One value is the same at every position (vector body and tail alike).
      const std::vector<double> same =
          c.op(full({37}, -2.3, {dtype, device()})).to_vector<double>();
      for (double v : same) ASSERT_EQ(v, same[0]) << what;
    }
  }
}

TEST_P(Activation, HalfDtypesComputeInFloat32AndRoundOnce) {
  for (Dtype dtype : {kBFloat16, kFloat16}) {
    const Tensor x = from_vector(random_values(240, 5, -6, 6), {12, 20}, {dtype, device()});
    const std::vector<double> held = x.to_vector<double>();
    const double ulp = dtype == kBFloat16 ? 0x1p-7 : 0x1p-10;
    for (const ActivationCase& c : cases()) {
      std::vector<double> expected(held.size());
      for (std::size_t i = 0; i < held.size(); ++i) expected[i] = c.ref(held[i]);
      const std::string what = fmt::format("{} {}", c.name, dtype_name(dtype));
      const Tensor y = c.op(x);
      EXPECT_EQ(y.dtype(), dtype) << what;
      expect_close(y, expected, ulp, 1e-6, what);
      expect_close(c.op(x.t()).t(), expected, ulp, 1e-6, what + " (transposed)");
      // The gradient comes back in the half dtype, from the float32 formula rounded once.
      const Tensor leaf = x.detach().requires_grad_();
      c.op(leaf).sum().backward();
      EXPECT_EQ(leaf.grad().dtype(), dtype) << what;
      std::vector<double> slope(held.size());
      for (std::size_t i = 0; i < held.size(); ++i) slope[i] = c.slope(held[i]);
      expect_close(leaf.grad(), slope, 2 * ulp, 1e-3, what + " gradient");
    }
  }
}

TEST_P(Activation, GradientsMatchTheAnalyticDerivative) {
  const std::vector<double> values = inputs();
  for (Dtype dtype : {kFloat32, kFloat64}) {
    const Tensor x = from_vector(values, {20, 16}, {dtype, device()});
    const std::vector<double> held = x.to_vector<double>();
    const std::vector<double> upstream = random_values(values.size(), 3, 0.5, 2);
    const Tensor g = from_vector(upstream, {20, 16}, {dtype, device()});
    const std::vector<double> g_held = g.to_vector<double>();
    for (const ActivationCase& c : cases()) {
      const Tensor leaf = x.detach().requires_grad_();
      (c.op(leaf) * g).sum().backward();
      std::vector<double> expected(held.size());
      for (std::size_t i = 0; i < held.size(); ++i) expected[i] = g_held[i] * c.slope(held[i]);
      // The slopes' terms cancel in the far left tail (Phi(x) + x phi(x)): absolute there.
      expect_close(leaf.grad(), expected, dtype == kFloat32 ? 1e-5 : 1e-10,
                   dtype == kFloat32 ? 1e-6 : 1e-14,
                   fmt::format("{} {} gradient", c.name, dtype_name(dtype)));
    }
  }
}

TEST_P(Activation, IntegerAndBoolInputsAreRefused) {
  expect_throw_with<DtypeError>(
      [&] {
        (void)gelu(tensor({1, 2}, device()));
      },
      {"[gelu] is not defined for int64 tensors; convert with .to(kFloat32)"});
  expect_throw_with<DtypeError>(
      [&] {
        (void)gelu(tensor({1, 2}, {device(), kInt32}), GeluApproximation::kTanh);
      },
      {"[gelu] is not defined for int32 tensors"});
  expect_throw_with<DtypeError>(
      [&] {
        (void)silu(tensor({1, 2}, {device(), kUInt8}));
      },
      {"[silu] is not defined for uint8 tensors"});
  expect_throw_with<DtypeError>(
      [&] {
        (void)silu(full({2}, 1, {kBool, device()}));
      },
      {"[silu] is not defined for bool tensors"});
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Activation);

}  // namespace
}  // namespace tessera
