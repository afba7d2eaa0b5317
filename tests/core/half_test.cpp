// bfloat16 and float16 on every device: the dtype's rules, conversions (bit-exact against an
// independent host rounding), factories, printing, and the ops computed in float32 against a
// float64 reference rounded to the format.
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <unistd.h>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_close;
using testing::expect_throw_with;
using testing::random_values;

constexpr Dtype kHalfTypes[] = {kBFloat16, kFloat16};

// x rounded to `dtype` the way IEEE round-to-nearest-even does, written independently of
// tessera's bit tricks: through float first (as every conversion from float64 does), then to
// the format's significand bits, with float16's subnormal spacing and overflow.
double half_round(double x, Dtype dtype) {
  x = static_cast<double>(static_cast<float>(x));
  if (!std::isfinite(x) || x == 0) return x;
  const int bits = dtype == kBFloat16 ? 8 : 11;         // significand bits
  const int min_exp = dtype == kBFloat16 ? -133 : -24;  // spacing of the subnormals
  const double max = dtype == kBFloat16 ? 0x1.fep127 : 65504.0;
  int e = 0;
  std::frexp(x, &e);
  const double quantum = std::ldexp(1.0, std::max(e - bits, min_exp));
  const double r = std::nearbyint(x / quantum) * quantum;
  if (std::abs(r) > max) return std::copysign(std::numeric_limits<double>::infinity(), x);
  return r;
}

std::vector<double> half_round(const std::vector<double>& v, Dtype dtype) {
  std::vector<double> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = half_round(v[i], dtype);
  return r;
}

// One unit in the last place at 1.0: the relative error of one rounding is at most half.
double ulp(Dtype dtype) { return dtype == kBFloat16 ? 0x1p-7 : 0x1p-10; }

void expect_same_values(const std::vector<double>& actual, const std::vector<double>& expected,
                        const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(actual[i])) << what << " at " << i;
    } else {
      EXPECT_EQ(actual[i], expected[i]) << what << " at " << i << " (input rounded)";
      EXPECT_EQ(std::signbit(actual[i]), std::signbit(expected[i])) << what << " at " << i;
    }
  }
}

TEST(HalfDtype, NamesSizesAndPromotion) {
  EXPECT_EQ(dtype_name(kBFloat16), "bfloat16");
  EXPECT_EQ(dtype_name(kFloat16), "float16");
  EXPECT_EQ(itemsize(kBFloat16), 2u);
  EXPECT_EQ(itemsize(kFloat16), 2u);
  EXPECT_TRUE(is_floating(kBFloat16) && is_floating(kFloat16));
  EXPECT_TRUE(is_half(kBFloat16) && is_half(kFloat16) && !is_half(kFloat32));
  EXPECT_FALSE(is_integral(kFloat16));
  EXPECT_EQ(promote_types(kBFloat16, kFloat16), kFloat32);
  EXPECT_EQ(promote_types(kFloat16, kBFloat16), kFloat32);
  EXPECT_EQ(promote_types(kBFloat16, kInt64), kBFloat16);
  EXPECT_EQ(promote_types(kUInt8, kFloat16), kFloat16);
  EXPECT_EQ(promote_types(kBFloat16, kFloat32), kFloat32);
  EXPECT_EQ(promote_types(kFloat64, kFloat16), kFloat64);
  EXPECT_EQ(promote_types(kBFloat16, kBFloat16), kBFloat16);
  std::ostringstream os;
  os << kFloat16;
  EXPECT_EQ(os.str(), "float16");
}

class Half : public DeviceTest {};

// The edge cases of each format: ties to even, overflow, subnormals, NaN, infinities, -0.
std::vector<double> edge_values(Dtype dtype) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> v = {0.0,          -0.0,   1.0,     -2.5,  inf, -inf,
                           std::nan(""), 3.0e38, -3.4e38, 1e-30, 0.1, 1.0 / 3};
  if (dtype == kBFloat16) {
    v.insert(v.end(), {1 + 0x1p-8,            // a tie: rounds down to 1 (even)
                       1 + 3 * 0x1p-8,        // a tie: rounds up to 1 + 2^-6 (even)
                       1 + 0x1p-8 + 0x1p-20,  // just above the tie: rounds up
                       0x1.fffp127,           // rounds past the largest: infinity
                       0x1p-130});            // a bfloat16 subnormal
  } else {
    v.insert(v.end(), {1 + 0x1p-11, 1 + 3 * 0x1p-11, 1 + 0x1p-11 + 0x1p-20, 65504, 65519, 65520,
                       -70000,  // the largest; below, at the overflow tie
                       0x1p-24, 0x1p-25, 3 * 0x1p-25, 0x1p-26,  // subnormals and their ties
                       0x1p-14 - 0x1p-25, 6.1e-5});
  }
  return v;
}

TEST_P(Half, ConversionsRoundToNearestEvenBitExactly) {
  for (Dtype dtype : kHalfTypes) {
    std::vector<double> values = edge_values(dtype);
    // Random values over many magnitudes, as float32 holds them.
    for (double r : random_values(4000, 11, -1, 1)) {
      values.push_back(static_cast<float>(r * std::pow(2.0, std::round(r * 40))));
    }
    const std::string what = std::string(dtype_name(dtype));
    const Tensor f32 =
        from_vector(values, {static_cast<std::int64_t>(values.size())}, {kFloat32, device()});
    const Tensor h = f32.to(dtype);
    EXPECT_EQ(h.dtype(), dtype);
    EXPECT_EQ(h.nbytes(), values.size() * 2);
    const std::vector<double> expected = half_round(values, dtype);
    expect_same_values(h.to_vector<double>(), expected, what + " from float32, read as double");
    // From float64 directly, and back through float32 on the device.
    const Tensor from64 =
        from_vector(values, {static_cast<std::int64_t>(values.size())}, {dtype, device()});
    expect_same_values(from64.to(kFloat32).to_vector<double>(), expected,
                       what + " from float64, back through float32 on the device");
    // A strided view converts element by element.
    const Tensor every_other = f32.slice(0, 0, f32.numel(), 2).to(dtype);
    std::vector<double> expected_strided;
    for (std::size_t i = 0; i < values.size(); i += 2) expected_strided.push_back(expected[i]);
    expect_same_values(every_other.to_vector<double>(), expected_strided, what + " strided");
    // The conversion is exact the other way: every half value is a float.
    const std::vector<float> as_float = h.to_vector<float>();
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (!std::isnan(expected[i])) EXPECT_EQ(static_cast<double>(as_float[i]), expected[i]);
    }
  }
}

TEST_P(Half, ConvertsToAndFromEveryDtype) {
  const std::vector<double> whole = {0, 1, 2, 7, 100, 255};
  for (Dtype half : kHalfTypes) {
    const Tensor h = from_vector(whole, {6}, {half, device()});
    for (Dtype other : {kBool, kUInt8, kInt32, kInt64, kFloat32, kFloat64, kBFloat16, kFloat16}) {
      const std::string what = fmt::format("{} <-> {}", dtype_name(half), dtype_name(other));
      const Tensor o = h.to(other);
      EXPECT_EQ(o.dtype(), other) << what;
      std::vector<double> expected = whole;
      if (other == kBool) {
        for (double& x : expected) x = x != 0;
      }
      EXPECT_EQ(o.to_vector<double>(), expected) << what;
      EXPECT_EQ(o.to(half).to_vector<double>(), expected) << what << " and back";
    }
    // Negative and fractional values into signed integers truncate, as float32 does.
    const Tensor f = from_vector(std::vector<double>{-3.75, 2.5, -0.5}, {3}, {half, device()});
    EXPECT_EQ(f.to(kInt64).to_vector<std::int64_t>(), (std::vector<std::int64_t>{-3, 2, 0}));
    EXPECT_EQ(f.to(kBool).to_vector<bool>(), (std::vector<bool>{true, true, true}));
  }
}

TEST_P(Half, FactoriesFromVectorAndPrinting) {
  for (Dtype dtype : kHalfTypes) {
    const std::string what = std::string(dtype_name(dtype));
    EXPECT_EQ(zeros({2, 3}, {dtype, device()}).to_vector<float>(), std::vector<float>(6, 0.0f));
    EXPECT_EQ(ones({4}, {dtype, device()}).to_vector<float>(), std::vector<float>(4, 1.0f));
    const Tensor pi = full({3}, M_PI, {dtype, device()});
    EXPECT_EQ(pi.dtype(), dtype);
    EXPECT_EQ(pi.to_vector<double>(), std::vector<double>(3, half_round(M_PI, dtype))) << what;
    const Tensor r = arange(0, 300, 1, {dtype, device()});
    EXPECT_EQ(r.dtype(), dtype);
    const std::vector<double> got = r.to_vector<double>();
    for (int i = 0; i < 300; ++i) EXPECT_EQ(got[i], half_round(i, dtype)) << what << " " << i;
    const Tensor u = rand({1000}, {dtype, device()});
    EXPECT_EQ(u.dtype(), dtype);
    const double lo = min(u).item<double>(), hi = max(u).item<double>();
    EXPECT_GE(lo, 0.0);
    EXPECT_LE(hi, 1.0);
    EXPECT_GT(hi - lo, 0.9) << what;  // spread over [0, 1]
    const Tensor n = randn({4000}, {dtype, device()});
    EXPECT_NEAR(mean(n.to(kFloat64)).item<double>(), 0.0, 0.1) << what;
    Tensor z = zeros({3}, {dtype, device()});
    z.fill_(2.75);
    EXPECT_EQ(z.to_vector<float>(), std::vector<float>(3, 2.75f));
    // tensor() and from_vector() through float.
    const Tensor t = tensor({{1.5, -2.0}, {0.25, 1e5}}, {dtype, device()});
    EXPECT_EQ(t.to_vector<double>(),
              (std::vector<double>{1.5, -2.0, 0.25, half_round(1e5, dtype)}));
    const Tensor v = from_vector(std::vector<float>{0.1f, 0.2f}, {2}, {dtype, device()});
    EXPECT_EQ(v.to_vector<float>()[0], static_cast<float>(half_round(0.1f, dtype)));
    std::ostringstream os;
    os << t;
    EXPECT_NE(os.str().find("dtype=" + what), std::string::npos) << os.str();
    EXPECT_NE(os.str().find("1.5"), std::string::npos) << os.str();
  }
}

struct HalfUnary {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double lo, hi;
};

TEST_P(Half, ElementwiseOpsMatchFloat64Reference) {
  const std::vector<HalfUnary> unary = {
      {"neg", [](const Tensor& x) { return -x; }, [](double x) { return -x; }, -3, 3},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, -4, 4},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, 0.1,
       10},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 0,
       9},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::abs(x); }, -3, 3},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0; }, -3,
       3},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); },
       [](double x) { return 1 / (1 + std::exp(-x)); }, -6, 6},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, -3,
       3},
      {"x*3", [](const Tensor& x) { return x * 3.0; }, [](double x) { return x * 3; }, -3, 3},
      {"x-1", [](const Tensor& x) { return x - 1.0; }, [](double x) { return x - 1; }, -3, 3},
      {"1/x", [](const Tensor& x) { return 1.0 / x; }, [](double x) { return 1 / x; }, 0.5, 4},
      {"pow2", [](const Tensor& x) { return pow(x, 2.0); }, [](double x) { return x * x; }, -3, 3},
  };
  for (Dtype dtype : kHalfTypes) {
    for (const HalfUnary& c : unary) {
      const Tensor x = from_vector(random_values(240, 5, c.lo, c.hi), {12, 20}, {dtype, device()});
      const std::vector<double> held = x.to_vector<double>();
      std::vector<double> expected(held.size());
      for (std::size_t i = 0; i < held.size(); ++i) expected[i] = c.ref(held[i]);
      const std::string what = fmt::format("{} {}", c.name, dtype_name(dtype));
      const Tensor y = c.op(x);
      EXPECT_EQ(y.dtype(), dtype) << what;
      // One rounding of a float32 result: within one ulp of the exact value.
      expect_close(y, expected, ulp(dtype), 1e-6, what);
      expect_close(c.op(x.t()).t(), expected, ulp(dtype), 1e-6, what + " (transposed)");
    }
    // Binary ops with broadcasting, and the results' dtypes.
    const Tensor a = from_vector(random_values(60, 1, -2, 2), {6, 10}, {dtype, device()});
    const Tensor b = from_vector(random_values(10, 2, 0.5, 2), {10}, {dtype, device()});
    const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
    std::vector<double> sum(60), prod(60), quot(60), mx(60), lt(60);
    for (int i = 0; i < 60; ++i) {
      sum[i] = av[i] + bv[i % 10];
      prod[i] = av[i] * bv[i % 10];
      quot[i] = av[i] / bv[i % 10];
      mx[i] = std::max(av[i], bv[i % 10]);
      lt[i] = av[i] < bv[i % 10];
    }
    const std::string what = std::string(dtype_name(dtype));
    expect_close(a + b, sum, ulp(dtype), 1e-6, what + " add");
    expect_close(a * b, prod, ulp(dtype), 1e-6, what + " mul");
    expect_close(a / b, quot, ulp(dtype), 1e-6, what + " div");
    expect_close(maximum(a, b), mx, 0, 0, what + " maximum");
    EXPECT_EQ((a < b).dtype(), kBool);
    expect_close(a < b, lt, 0, 0, what + " lt");
    EXPECT_EQ((a + b).dtype(), dtype);
    EXPECT_EQ((a + 1.5).dtype(), dtype);
    EXPECT_EQ((a + a.to(kFloat32)).dtype(), kFloat32);
    EXPECT_EQ((a + ones({10}, {kInt64, device()})).dtype(), dtype);
    EXPECT_EQ((a.to(kBFloat16) + a.to(kFloat16)).dtype(), kFloat32);
    // In place: computed in float32, stored in self's half type.
    Tensor c = a.clone();
    c.add_(b);
    c.mul_(0.5);
    std::vector<double> half_sum(60);
    for (int i = 0; i < 60; ++i) half_sum[i] = half_round(sum[i], dtype) * 0.5;
    EXPECT_EQ(c.dtype(), dtype);
    expect_close(c, half_sum, ulp(dtype), 1e-6, what + " add_ then mul_");
    const Tensor w = where(a > 0.0, a, b);
    EXPECT_EQ(w.dtype(), dtype);
    std::vector<double> wv(60);
    for (int i = 0; i < 60; ++i) wv[i] = av[i] > 0 ? av[i] : bv[i % 10];
    expect_close(w, wv, 0, 0, what + " where");
  }
}

TEST_P(Half, ReductionsAccumulateInFloat32) {
  for (Dtype dtype : kHalfTypes) {
    const std::string what = std::string(dtype_name(dtype));
    // Added up in the half type, the sum would stop growing at 256 (bfloat16) or 2048
    // (float16), where adding 1 is a tie that rounds back down.
    const Tensor o = ones({4096}, {dtype, device()});
    EXPECT_EQ(sum(o).dtype(), dtype);
    EXPECT_EQ(sum(o).item<double>(), 4096.0) << what;
    EXPECT_EQ(mean(o).item<double>(), 1.0) << what;
    const Tensor x = from_vector(random_values(3000, 9, -1, 2), {30, 100}, {dtype, device()});
    const std::vector<double> v = x.to_vector<double>();
    double total = 0, top = -1e9;
    std::int64_t top_at = 0;
    std::vector<double> rows(30, 0.0);
    for (int i = 0; i < 3000; ++i) {
      total += v[i];
      rows[i / 100] += v[i];
      if (v[i] > top) {
        top = v[i];
        top_at = i;
      }
    }
    expect_close(std::vector<double>{sum(x).item<double>()}, {total}, ulp(dtype), 1e-3,
                 what + " sum");
    expect_close(std::vector<double>{mean(x).item<double>()}, {total / 3000}, ulp(dtype), 1e-6,
                 what + " mean");
    expect_close(sum(x, {1}), rows, ulp(dtype), 1e-3, what + " sum over dim 1");
    EXPECT_EQ(max(x).item<double>(), top) << what;
    EXPECT_EQ(argmax(x).item<std::int64_t>(), top_at) << what;
    EXPECT_EQ(argmax(x).dtype(), kInt64);
    const Tensor s = softmax(x, 1);
    EXPECT_EQ(s.dtype(), dtype);
    expect_close(sum(s.to(kFloat64), {1}), std::vector<double>(30, 1.0), 0, 100 * ulp(dtype),
                 what + " softmax rows sum to 1");
  }
}

// A float64 matmul of the values the half tensors hold.
std::vector<double> matmul_ref(const std::vector<double>& a, const std::vector<double>& b, int m,
                               int k, int n) {
  std::vector<double> c(m * n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int p = 0; p < k; ++p)
      for (int j = 0; j < n; ++j) c[i * n + j] += a[i * k + p] * b[p * n + j];
  return c;
}

TEST_P(Half, MatmulLinearAndConvMatchFloat64Reference) {
  for (Dtype dtype : kHalfTypes) {
    const std::string what = std::string(dtype_name(dtype));
    const Tensor a = from_vector(random_values(16 * 64, 3), {16, 64}, {dtype, device()});
    const Tensor b = from_vector(random_values(64 * 8, 4), {64, 8}, {dtype, device()});
    const std::vector<double> expected =
        matmul_ref(a.to_vector<double>(), b.to_vector<double>(), 16, 64, 8);
    const Tensor c = matmul(a, b);
    EXPECT_EQ(c.dtype(), dtype);
    // Accumulated in float32 and rounded once: one ulp of the result, plus float32's error.
    expect_close(c, expected, ulp(dtype), 1e-4, what + " matmul");
    expect_close(matmul(b.t(), a.t()).t(), expected, ulp(dtype), 1e-4, what + " matmul of views");
    // Linear converted to the half type.
    nn::Linear layer(64, 8);
    layer.to(device());
    layer.to(dtype);
    EXPECT_EQ(layer.weight.dtype(), dtype);
    const Tensor y = layer(a);
    EXPECT_EQ(y.dtype(), dtype);
    std::vector<double> lin =
        matmul_ref(a.to_vector<double>(), layer.weight.t().to_vector<double>(), 16, 64, 8);
    const std::vector<double> bias = layer.bias.to_vector<double>();
    for (int i = 0; i < 16 * 8; ++i) lin[i] += bias[i % 8];
    expect_close(y, lin, ulp(dtype), 1e-4, what + " Linear");
    // conv2d and pooling against tessera's float64 path on the same values.
    const Tensor x = from_vector(random_values(2 * 3 * 9 * 9, 5), {2, 3, 9, 9}, {dtype, device()});
    const Tensor w = from_vector(random_values(4 * 3 * 3 * 3, 6), {4, 3, 3, 3}, {dtype, device()});
    const Tensor bb = from_vector(random_values(4, 7), {4}, {dtype, device()});
    const Tensor out = conv2d(x, w, bb, {.stride = {2, 2}, .padding = {1, 1}});
    EXPECT_EQ(out.dtype(), dtype);
    const Tensor ref = conv2d(x.to(kFloat64), w.to(kFloat64), bb.to(kFloat64),
                              {.stride = {2, 2}, .padding = {1, 1}});
    expect_close(out, ref.to_vector<double>(), ulp(dtype), 1e-4, what + " conv2d");
    expect_close(max_pool2d(x), max_pool2d(x.to(kFloat64)).to_vector<double>(), 0, 0,
                 what + " max_pool2d");
    expect_close(avg_pool2d(x), avg_pool2d(x.to(kFloat64)).to_vector<double>(), ulp(dtype), 1e-6,
                 what + " avg_pool2d");
  }
}

// bfloat16 convolutions of the im2col shapes (many channels, strides, 1x1) multiply the
// bfloat16 values as they are where the CPU can (Note [bfloat16 convolution]): float32 sums
// of exact products, rounded once, so within one unit in the last place of the exact result
// plus float32's error, and within one unit of the float32 copies' result. Their gradients
// come from float32 copies on both paths: the same bits.
TEST_P(Half, ConvolutionsOfManyChannelsRoundOnce) {
  struct Case {
    Shape x, w;
    Conv2dOptions options;
  };
  const std::vector<Case> cases = {
      {{2, 40, 9, 9}, {24, 40, 3, 3}, {.stride = {1, 1}, .padding = {1, 1}}},
      {{3, 8, 11, 10}, {16, 8, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}},
      {{2, 48, 6, 6}, {12, 48, 1, 1}, {}},
      {{9, 64, 12, 12}, {70, 64, 3, 3}, {.stride = {1, 1}, .padding = {1, 1}}}};
  for (const Dtype dtype : kHalfTypes) {
    for (const Case& c : cases) {
      const std::string what = fmt::format("{} x {} w {}", dtype_name(dtype), c.x.str(), c.w.str());
      const auto sized = [&](const Shape& s, std::uint64_t seed) {
        return from_vector(random_values(static_cast<std::size_t>(s.numel()), seed), s,
                           {dtype, device()});
      };
      Tensor x = sized(c.x, 21).requires_grad_(), w = sized(c.w, 22).requires_grad_();
      Tensor b = sized({c.w[0]}, 23).requires_grad_();
      const Tensor out = conv2d(x, w, b, c.options);
      ASSERT_EQ(out.dtype(), dtype) << what;
      const Tensor ref = conv2d(x.detach().to(kFloat64), w.detach().to(kFloat64),
                                b.detach().to(kFloat64), c.options);
      expect_close(out, ref.to_vector<double>(), ulp(dtype), 1e-4, what + " against float64");
      Tensor xf = x.detach().to(kFloat32).requires_grad_();
      Tensor wf = w.detach().to(kFloat32).requires_grad_();
      Tensor bf = b.detach().to(kFloat32).requires_grad_();
      const Tensor copies = conv2d(xf, wf, bf, c.options);
      expect_close(out, copies.to(dtype).to_vector<double>(), ulp(dtype), 1e-4,
                   what + " against the float32 copies");
      // The gradients too: each rounded once from float32 sums, in the copies' order or in
      // the bfloat16 product's (Note [bfloat16 convolution backward]).
      const Tensor g = sized(out.shape(), 24);
      out.backward(g);
      copies.backward(g.to(kFloat32));
      Tensor xd = x.detach().to(kFloat64).requires_grad_();
      Tensor wd = w.detach().to(kFloat64).requires_grad_();
      Tensor bd = b.detach().to(kFloat64).requires_grad_();
      conv2d(xd, wd, bd, c.options).backward(g.to(kFloat64));
      const std::vector<std::pair<const char*, std::array<Tensor, 3>>> grads = {
          {" input gradient", {x.grad(), xf.grad(), xd.grad()}},
          {" weight gradient", {w.grad(), wf.grad(), wd.grad()}},
          {" bias gradient", {b.grad(), bf.grad(), bd.grad()}}};
      for (const auto& [name, t] : grads) {
        ASSERT_EQ(t[0].dtype(), dtype) << what << name;
        expect_close(t[0], t[2].to_vector<double>(), ulp(dtype), 1e-4, what + name + " (float64)");
        expect_close(t[0], t[1].to(dtype).to_vector<double>(), ulp(dtype), 1e-4,
                     what + name + " (the float32 copies)");
      }
    }
    // One gradient wanted at a time, without a bias, one image and none.
    for (const std::int64_t images : {1, 0}) {
      const Shape xs{images, 32, 7, 7}, ws{16, 32, 3, 3};
      const auto values = [&](const Shape& s, std::uint64_t seed) {
        return from_vector(random_values(static_cast<std::size_t>(s.numel()), seed), s);
      };
      const Tensor x32 = values(xs, 31), w32 = values(ws, 32);
      const Conv2dOptions same{.stride = {1, 1}, .padding = {1, 1}};
      for (const bool want_x : {true, false}) {
        Tensor x = x32.to(device()).to(dtype), w = w32.to(device()).to(dtype);
        Tensor xf = x.to(kFloat32), wf = w.to(kFloat32);
        (want_x ? x : w).requires_grad_();
        (want_x ? xf : wf).requires_grad_();
        const Tensor out = conv2d(x, w, Tensor{}, same);
        const Tensor g = values(out.shape(), 33).to(device()).to(dtype);
        out.backward(g);
        conv2d(xf, wf, Tensor{}, same).backward(g.to(kFloat32));
        const std::string what =
            fmt::format("{} x [{}, 32, 7, 7], only the {} gradient", dtype_name(dtype), images,
                        want_x ? "input" : "weight");
        EXPECT_FALSE((want_x ? w : x).grad().defined()) << what;
        const Tensor got = (want_x ? x : w).grad(), want = (want_x ? xf : wf).grad();
        ASSERT_EQ(got.shape(), want.shape()) << what;
        expect_close(got, want.to(dtype).to_vector<double>(), ulp(dtype), 1e-4, what);
      }
    }
    // The window is checked before a backend looks at the shapes (a stride of 0 once divided
    // by zero there, ending the process).
    const Tensor x = zeros({1, 40, 5, 5}, {dtype, device()});
    const Tensor w = zeros({8, 40, 3, 3}, {dtype, device()});
    for (const auto& stride : {std::array<int, 2>{0, 1}, std::array<int, 2>{1, 0}}) {
      expect_throw_with<ShapeError>(
          [&] { conv2d(x, w, Tensor{}, {.stride = stride}); },
          {"[conv2d] stride must be positive and padding non-negative", "stride 0"});
    }
  }
}

// Kernel taps that only ever see padding have a weight gradient of exactly 0, also after
// another convolution's gradient has run on this thread (oneDNN's bfloat16 weight gradient
// left such taps with its scratchpad's old values: Note [Weight gradients from a clean
// scratchpad]).
TEST_P(Half, ConvolutionTapsThatSeeOnlyPaddingHaveZeroGradients) {
  for (const Dtype dtype : kHalfTypes) {
    const auto sized = [&](const Shape& s, std::uint64_t seed) {
      return from_vector(random_values(static_cast<std::size_t>(s.numel()), seed), s,
                         {dtype, device()});
    };
    // Another gradient first, leaving its sums behind.
    Tensor x0 = sized({4, 64, 12, 12}, 41).requires_grad_();
    Tensor w0 = sized({64, 64, 3, 3}, 42).requires_grad_();
    conv2d(x0, w0, Tensor{}, {.stride = {1, 1}, .padding = {1, 1}})
        .backward(sized({4, 64, 12, 12}, 43));
    // Rows of one pixel: with padding 3 and stride 4 across, only kernel column 3 reads it.
    Tensor x = sized({1, 123, 8, 1}, 44).requires_grad_();
    Tensor w = sized({2, 123, 2, 6}, 45).requires_grad_();
    const Conv2dOptions options{.stride = {1, 4}, .padding = {0, 3}};
    const Tensor y = conv2d(x, w, Tensor{}, options);
    const Tensor g = sized(y.shape(), 46);
    y.backward(g);
    Tensor wd = w.detach().to(kFloat64).requires_grad_();
    conv2d(x.detach().to(kFloat64), wd, Tensor{}, options).backward(g.to(kFloat64));
    const std::string what = fmt::format("{} weight gradient", dtype_name(dtype));
    expect_close(w.grad(), wd.grad().to_vector<double>(), ulp(dtype), 1e-4, what);
    const auto dw = w.grad().to(kFloat64).to_vector<double>();
    for (std::size_t i = 0; i < dw.size(); ++i) {
      if (i % 6 != 3) ASSERT_EQ(dw[i], 0.0) << what << " at " << i << " (a tap in the padding)";
    }
  }
}

// A product of 8192 terms, which a GPU GEMM may split over several blocks (split-K), is still
// summed in float32 and rounded once (Note [CUDA half GEMM]): every output within half a
// unit in the last place of the exact sum, plus float32's error. Partial sums stored in the
// half type would miss it. Positive inputs, so nothing cancels.
TEST_P(Half, ALongProductIsRoundedOnceNotInPieces) {
  constexpr int m = 8, k = 8192, n = 8;
  for (Dtype dtype : kHalfTypes) {
    const Tensor a = from_vector(random_values(m * k, 11, 0.5, 1.0), {m, k}, {dtype, device()});
    const Tensor b = from_vector(random_values(k * n, 12, 0.5, 1.0), {k, n}, {dtype, device()});
    const std::vector<double> exact =
        matmul_ref(a.to_vector<double>(), b.to_vector<double>(), m, k, n);
    const std::vector<double> c = matmul(a, b).to_vector<double>();
    const int mantissa_bits = dtype == kBFloat16 ? 7 : 10;
    for (std::size_t i = 0; i < exact.size(); ++i) {
      const double half_ulp = std::ldexp(0.5, std::ilogb(exact[i]) - mantissa_bits);
      EXPECT_LE(std::abs(c[i] - exact[i]), half_ulp + 1e-5 * exact[i])
          << dtype_name(dtype) << " output " << i << ": " << c[i] << " against " << exact[i];
    }
  }
}

// Note [One primitive on several threads]: products of one layout on several threads at once
// (two user threads here; two logical devices' queues in a data-parallel fit) shared one
// oneDNN scratchpad, and about one product in two was wrong by as much as its values.
TEST_P(Half, ProductsOfOneShapeOnSeveralThreadsAtOnceAreExact) {
  const Tensor a =
      from_vector(random_values(64 * 64, 21, -2.0, 2.0), {64, 64}, {kBFloat16, device()});
  const Tensor b =
      from_vector(random_values(64 * 64, 22, -2.0, 2.0), {64, 64}, {kBFloat16, device()});
  const std::vector<double> expected = matmul(a, b).to_vector<double>();
  std::array<int, 2> wrong{};
  std::array<std::thread, 2> threads;
  for (std::size_t t = 0; t < threads.size(); ++t) {
    threads[t] = std::thread([&, t] {
      std::vector<Tensor> products;
      for (int i = 0; i < 200; ++i) products.push_back(matmul(a, b));
      for (const Tensor& c : products) wrong[t] += c.to_vector<double>() != expected;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong[0], 0) << "of 200 products on the first thread";
  EXPECT_EQ(wrong[1], 0) << "of 200 products on the second thread";
}

// The host's resident memory, in MiB.
double resident_mib() {
  std::ifstream statm("/proc/self/statm");
  double pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

// Each layout of a bfloat16 product kept its oneDNN primitive (about 100 KB) for ever: a
// model fed batches of every size from 1 to 8000 grew by 900 MB. The most recent few
// hundred are kept. (Without AVX512-BF16 the products run in float32 and keep nothing.)
TEST(HalfMemory, ProductsOfManyShapesKeepABoundedCacheOfPrimitives) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's allocator keeps freed memory resident";
#else
  const Tensor w = ones({64, 64}, kBFloat16);
  const Tensor rows = ones({1301, 64}, kBFloat16);
  for (std::int64_t m = 1; m <= 300; ++m) (void)rows.narrow(0, 0, m).contiguous().matmul(w);
  synchronize();
  const double before = resident_mib();
  for (std::int64_t m = 301; m <= 1300; ++m) (void)rows.narrow(0, 0, m).contiguous().matmul(w);
  synchronize();
  EXPECT_LT(resident_mib() - before, 50.0) << "1,000 more shapes; each primitive is ~0.1 MB";
#endif
}

// The gradient of a weight multiplied with a batch (a [B, M, K] input times a [K, N] weight)
// sums over the batch too: rounded once, as one GEMM over the folded batch, not once per
// batch element and again in the sum.
TEST_P(Half, ABroadcastWeightsGradientIsRoundedOnce) {
  constexpr int batch = 16, m = 8, k = 16, n = 8;
  for (Dtype dtype : kHalfTypes) {
    const Tensor a =
        from_vector(random_values(batch * m * k, 21, -1, 1), {batch, m, k}, {dtype, device()});
    const Tensor w =
        from_vector(random_values(k * n, 22, -1, 1), {k, n}, {dtype, device()}).requires_grad_();
    const Tensor g =
        from_vector(random_values(batch * m * n, 23, -1, 1), {batch, m, n}, {dtype, device()});
    matmul(a, w).backward(g);
    // The exact gradient: a as [(B, M), K], transposed, times g as [(B, M), N].
    const std::vector<double> av = a.to_vector<double>(), gv = g.to_vector<double>();
    std::vector<double> at(static_cast<std::size_t>(k * batch * m));
    for (int r = 0; r < batch * m; ++r) {
      for (int c = 0; c < k; ++c) at[c * batch * m + r] = av[r * k + c];
    }
    const std::vector<double> exact = matmul_ref(at, gv, k, batch * m, n);
    const std::vector<double> got = w.grad().to_vector<double>();
    const int mantissa_bits = dtype == kBFloat16 ? 7 : 10;
    for (std::size_t i = 0; i < exact.size(); ++i) {
      const double half_ulp = std::ldexp(0.5, std::ilogb(std::abs(exact[i])) - mantissa_bits);
      EXPECT_LE(std::abs(got[i] - exact[i]), half_ulp + 1e-5 * std::abs(exact[i]))
          << dtype_name(dtype) << " gradient " << i << ": " << got[i] << " against " << exact[i];
    }
  }
}

// float16 sums past its range are infinite, as a float32 result rounded to float16 is; not
// clamped to the largest finite value (what a GPU GEMM's output conversion must match).
TEST_P(Half, Float16ProductsPastItsRangeAreInfinite) {
  const Tensor a = full({2, 1024}, 300.0, {kFloat16, device()});
  const Tensor b = full({1024, 3}, 300.0, {kFloat16, device()});
  const Tensor c = matmul(a, b);
  for (double v : c.to_vector<double>()) EXPECT_EQ(v, std::numeric_limits<double>::infinity());
  const Tensor d = matmul(a, -b);
  for (double v : d.to_vector<double>()) EXPECT_EQ(v, -std::numeric_limits<double>::infinity());
}

TEST_P(Half, RandomDrawsStayBelowTheirUpperBound) {
  // Rounded to nearest, a float32 draw near 1 became 1.0 in bfloat16 (0.2% of them).
  manual_seed(17);
  for (Dtype dtype : kHalfTypes) {
    const Tensor r = rand({200000}, {dtype, device()});
    EXPECT_LT(max(r).item<double>(), 1.0) << dtype_name(dtype);
    EXPECT_GE(min(r).item<double>(), 0.0) << dtype_name(dtype);
    EXPECT_NEAR(mean(r.to(kFloat64)).item<double>(), 0.5, 0.01) << dtype_name(dtype);
    // Small draws keep the format's precision (a grid of k / 256 had only 256 values).
    const Tensor positive = where(r > 0.0, r, 1.0);
    EXPECT_LT(min(positive).item<double>(), 1e-4) << dtype_name(dtype);
    const Tensor u = uniform({200000}, -3.0, 3.0, {dtype, device()});
    EXPECT_LT(max(u).item<double>(), 3.0) << dtype_name(dtype);
    EXPECT_GE(min(u).item<double>(), -3.0) << dtype_name(dtype);
    // Bounds the dtype cannot hold are refused (float16 drew -inf).
    if (dtype == kFloat16) {
      expect_throw_with<DtypeError>(
          [&] {
            uniform({4}, -1e5, 1e5, {dtype, device()});
          },
          {"[uniform] the value -100000 does not fit float16"});
    }
    // A dropout mask keeps 1 - p of a half input and keeps its mean (1 / (1 - p) scaling).
    nn::Dropout drop(0.97);
    const Tensor kept = drop(ones({400000}, {dtype, device()}));
    const double zeros_share = mean((kept == 0.0).to(kFloat64)).item<double>();
    EXPECT_NEAR(zeros_share, 0.97, 0.002) << dtype_name(dtype);  // 7 sigma
    EXPECT_NEAR(mean(kept.to(kFloat64)).item<double>(), 1.0, 0.07) << dtype_name(dtype);
  }
}

TEST_P(Half, AutogradGivesGradientsInTheParameterDtype) {
  for (Dtype dtype : kHalfTypes) {
    const std::string what = std::string(dtype_name(dtype));
    const Tensor x = from_vector(random_values(12, 8), {3, 4}, {dtype, device()}).requires_grad_();
    sum(x * x).backward();
    ASSERT_TRUE(x.grad().defined());
    EXPECT_EQ(x.grad().dtype(), dtype);
    std::vector<double> twice = x.to_vector<double>();
    for (double& g : twice) g *= 2;  // exact in either format
    EXPECT_EQ(x.grad().to_vector<double>(), twice) << what;
    // Through matmul, an activation and the float32 loss of half logits.
    const Tensor w =
        from_vector(random_values(4 * 5, 9), {4, 5}, {dtype, device()}).requires_grad_();
    const Tensor targets = tensor({0, 3, 4}, {kInt64, device()});
    const Tensor logits = matmul(tanh(x.detach()), w);
    const Tensor loss = nn::cross_entropy(logits, targets);
    EXPECT_EQ(loss.dtype(), kFloat32) << "a loss of half logits is float32";
    loss.backward();
    EXPECT_EQ(w.grad().dtype(), dtype);
    // The same in float64 from the same values.
    const Tensor w64 = w.detach().to(kFloat64).requires_grad_();
    nn::cross_entropy(matmul(tanh(x.detach().to(kFloat64)), w64), targets).backward();
    expect_close(w.grad(), w64.grad().to_vector<double>(), 4 * ulp(dtype), 4 * ulp(dtype),
                 what + " grad through matmul and cross_entropy");
    // A cast's backward casts the gradient back.
    const Tensor p = from_vector(random_values(5, 10), {5}, {kFloat32, device()}).requires_grad_();
    sum(p.to(dtype) * 3.0).backward();
    EXPECT_EQ(p.grad().dtype(), kFloat32);
    EXPECT_EQ(p.grad().to_vector<double>(), std::vector<double>(5, 3.0)) << what;
    // backward() inside an autocast scope: the formulas' sums would make a half bias's
    // gradient float32 there; the engine gives it back in the bias's dtype.
    const Tensor bias = zeros({5}, {dtype, device()}).requires_grad_();
    {
      const AutocastGuard autocast(device().kind(), dtype);
      nn::cross_entropy(matmul(x.detach(), w.detach()) + bias, targets).backward();
    }
    EXPECT_EQ(bias.grad().dtype(), dtype) << what;
  }
}

TEST_P(Half, OptimizersStepHalfParametersInFloat32) {
  for (Dtype dtype : kHalfTypes) {
    const std::string what = std::string(dtype_name(dtype));
    Tensor p = from_vector(std::vector<double>{1.0, -2.0, 0.5}, {3}, {dtype, device()});
    p.requires_grad_();
    p.set_grad(from_vector(std::vector<double>{0.5, 1.0, -4.0}, {3}, {dtype, device()}));
    optim::SGD sgd({p}, {.lr = 0.25});
    sgd.step();
    EXPECT_EQ(p.dtype(), dtype);
    EXPECT_EQ(p.to_vector<double>(), (std::vector<double>{0.875, -2.25, 1.5})) << what;
    // Adam's first step moves each weight by lr against its gradient's sign.
    Tensor q = from_vector(std::vector<double>{1.0, -2.0}, {2}, {dtype, device()});
    q.requires_grad_();
    q.set_grad(from_vector(std::vector<double>{0.3, -7.0}, {2}, {dtype, device()}));
    optim::Adam adam({q}, {.lr = 0.125});
    adam.step();
    expect_close(q, {0.875, -1.875}, ulp(dtype), 1e-3, what + " Adam");
  }
}

// Dense half operands run in float32 blocks (Note [Half elementwise] in cpu_elementwise.cpp)
// where the backend takes them; every value must be the float32 copies' result, bit for bit:
// edge values, sizes around the 2048-value block and one split across threads, and strided
// and broadcast operands (which still take the copies).
TEST_P(Half, DenseElementwiseEqualsTheFloat32CopiesBitForBit) {
  for (const Dtype dtype : kHalfTypes) {
    for (const std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{2047},
                                 std::int64_t{2049}, std::int64_t{300001}}) {
      const std::string what = fmt::format("{} n={}", dtype_name(dtype), n);
      std::vector<double> xs = edge_values(dtype), ys;
      for (double r : random_values(static_cast<std::size_t>(n), 5, -4, 4)) xs.push_back(r);
      xs.resize(static_cast<std::size_t>(n));
      for (double r : random_values(static_cast<std::size_t>(n), 6, -4, 4)) ys.push_back(r);
      const Tensor x = from_vector(xs, {n}, {dtype, device()});
      const Tensor y = from_vector(ys, {n}, {dtype, device()});
      const Tensor xf = x.to(kFloat32), yf = y.to(kFloat32);
      const auto same = [&](const Tensor& got, const Tensor& want, const std::string& op) {
        EXPECT_EQ(got.dtype(), dtype) << what << " " << op;
        expect_same_values(got.to_vector<double>(), want.to(dtype).to_vector<double>(),
                           what + " " + op);
      };
      using Unary = Tensor (*)(const Tensor&);
      const std::vector<std::pair<const char*, Unary>> unary = {
          {"neg", neg},   {"exp", exp},         {"log", log},   {"sqrt", sqrt}, {"abs", abs},
          {"relu", relu}, {"sigmoid", sigmoid}, {"tanh", tanh}, {"silu", silu}};
      for (const auto& [name, f] : unary) same(f(x), f(xf), name);
      same(gelu(x), gelu(xf), "gelu");
      same(gelu(x, GeluApproximation::kTanh), gelu(xf, GeluApproximation::kTanh), "gelu tanh");
      same(x + y, xf + yf, "add");
      same(x - y, xf - yf, "sub");
      same(x * y, xf * yf, "mul");
      same(x / y, xf / yf, "div");
      same(pow(x, y), pow(xf, yf), "pow");
      same(maximum(x, y), maximum(xf, yf), "maximum");
      same(minimum(x, y), minimum(xf, yf), "minimum");
      same(x + 0.3, xf + 0.3, "add scalar");
      same(sub(2.5, x), sub(2.5, xf), "scalar sub");
      same(div(1.0, x), div(1.0, xf), "scalar div");
      same(x * 3, xf * 3, "mul scalar");
      for (const double e : {2.0, 3.0, 0.5, -1.0, 1.0, 1.7}) {
        same(pow(x, e), pow(xf, e), fmt::format("pow {}", e));
      }
      // Backward of the activations that keep their input: the same gradient from the
      // half pass and from the float32 one (whose input and gradient hold the same values).
      const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> saved_input =
          {{"relu", [](const Tensor& t) { return relu(t); }},
           {"gelu", [](const Tensor& t) { return gelu(t); }},
           {"gelu tanh", [](const Tensor& t) { return gelu(t, GeluApproximation::kTanh); }},
           {"silu", [](const Tensor& t) { return silu(t); }}};
      for (const auto& [name, f] : saved_input) {
        Tensor xh = x.detach().requires_grad_(), xw = xf.detach().requires_grad_();
        f(xh).backward(y);
        f(xw).backward(yf);
        same(xh.grad(), xw.grad(), std::string(name) + " backward");
      }
      if (n >= 2) {
        // A strided operand of a unary op takes the float32 copies; binary ops take strided
        // and broadcast operands as they are: the same values either way.
        const Tensor every_other = x.slice(0, 0, n, 2);
        same(exp(every_other), exp(xf.slice(0, 0, n, 2)), "exp of a strided view");
        same(x + y.narrow(0, 0, 1), xf + yf.narrow(0, 0, 1), "add broadcast");
        same(y.narrow(0, 0, 1) / x, yf.narrow(0, 0, 1) / xf, "div broadcast first");
        const std::int64_t odd = n / 2;  // elements at odd positions
        same(every_other.narrow(0, 0, odd) * y.slice(0, 1, n, 2),
             xf.slice(0, 0, n, 2).narrow(0, 0, odd) * yf.slice(0, 1, n, 2),
             "mul of two strided views");
        {
          const std::int64_t k = n / 3;  // [k, 3] matrices: the largest size splits across threads
          const Tensor m = x.narrow(0, 0, 3 * k).view({k, 3});
          const Tensor mf = xf.narrow(0, 0, 3 * k).view({k, 3});
          const Tensor col = y.narrow(0, 0, k).view({k, 1});
          const Tensor colf = yf.narrow(0, 0, k).view({k, 1});
          same(m - col, mf - colf, "sub of a column");
          same(m.t() * col.t(), mf.t() * colf.t(), "mul of a transposed matrix and a row");
          same(pow(col, m), pow(colf, mf), "pow of a broadcast base");
        }
      }
    }
  }
}

// Half reductions read the half values as they are where the backend takes them (Note [Half
// reductions] in cpu_reduce.cpp); every result must be the float32 copy's, bit for bit: rows
// around the 512-value conversion block and the 16 and 32 accumulator lanes, short rows,
// columns, a middle dim, views and a size split across threads, with NaN and infinities.
TEST_P(Half, ReductionsEqualTheFloat32CopyBitForBit) {
  struct Case {
    Shape shape;
    bool edges;  // the dtype's edge values (NaN, infinities, overflow, subnormals) in front
  };
  const std::vector<Case> cases = {{{3, 1029}, true},   {{2, 513}, false},   {{300, 7}, true},
                                   {{1029, 37}, false}, {{4, 130, 9}, true}, {{1, 63}, false},
                                   {{513, 2049}, false}};
  for (const Dtype dtype : kHalfTypes) {
    for (const Case& c : cases) {
      const std::string what = fmt::format("{} {}", dtype_name(dtype), c.shape.str());
      const auto n = static_cast<std::size_t>(c.shape.numel());
      std::vector<double> xs = c.edges ? edge_values(dtype) : std::vector<double>{};
      for (double r : random_values(n, 11, -4, 4)) xs.push_back(r);
      xs.resize(n);
      const Tensor x = from_vector(xs, c.shape, {dtype, device()});
      // The views walk a different order than their dense float32 copies: random values,
      // whose sums in double are exact in any order.
      const Tensor plain = from_vector(random_values(n, 12, -4, 4), c.shape, {dtype, device()});
      const std::vector<std::pair<std::string, Tensor>> inputs = {
          {"dense", x},
          {"transposed", plain.transpose(0, c.shape.size() - 1)},
          {"every other row", plain.slice(0, 0, c.shape[0], 2)}};
      for (const auto& [layout, in] : inputs) {
        const Tensor f = in.to(kFloat32);
        const std::string where = what + " " + layout;
        const auto same = [&](const Tensor& got, const Tensor& want, const std::string& op) {
          ASSERT_EQ(got.dtype(), want.dtype() == kFloat32 ? dtype : want.dtype()) << where << op;
          expect_same_values(got.to_vector<double>(), want.to(got.dtype()).to_vector<double>(),
                             where + " " + op);
        };
        same(sum(in), sum(f), "sum");
        same(mean(in), mean(f), "mean");
        same(norm(in), norm(f), "norm");
        same(max(in), max(f), "max");
        same(min(in), min(f), "min");
        same(argmax(in), argmax(f), "argmax");
        for (const int d : {0, -1}) {
          const std::string on = fmt::format(" over dim {}", d);
          same(sum(in, {d}), sum(f, {d}), "sum" + on);
          same(mean(in, {d}, true), mean(f, {d}, true), "mean" + on);
          same(max(in, {d}), max(f, {d}), "max" + on);
          same(min(in, {d}), min(f, {d}), "min" + on);
          same(argmax(in, d), argmax(f, d), "argmax" + on);
          same(argmin(in, d), argmin(f, d), "argmin" + on);
        }
        if (in.dim() == 3) same(sum(in, {1}), sum(f, {1}), "sum over the middle dim");
      }
    }
  }
}

// A half softmax that records no gradient runs on the half values as they are where the
// backend takes them (Note [Half softmax] in cpu_softmax.cpp); one that does goes through
// float32 copies. Both must give the copies' values bit for bit: the last dim, a middle one
// narrower and one wider than the 256-column block, a size split across threads, rows with
// NaN and infinities.
TEST_P(Half, SoftmaxEqualsTheFloat32CopyBitForBit) {
  struct Case {
    Shape shape;
    int dim;
  };
  const std::vector<Case> cases = {{{37, 1029}, -1}, {{5, 300, 7}, 1}, {{3, 40, 600}, 1},
                                   {{300, 1100}, 1}, {{300, 1100}, 0}, {{1}, 0}};
  for (const Dtype dtype : kHalfTypes) {
    for (const Case& c : cases) {
      const auto n = static_cast<std::size_t>(c.shape.numel());
      std::vector<double> xs = edge_values(dtype);
      for (double r : random_values(n, 13, -8, 8)) xs.push_back(r);
      xs.resize(n);
      const Tensor x = from_vector(xs, c.shape, {dtype, device()});
      const Tensor xf = x.to(kFloat32);
      for (const bool log : {false, true}) {
        const std::string what = fmt::format("{} {} {} dim {}", log ? "log_softmax" : "softmax",
                                             dtype_name(dtype), c.shape.str(), c.dim);
        const auto op = [&](const Tensor& t) {
          return log ? log_softmax(t, c.dim) : softmax(t, c.dim);
        };
        const Tensor want = op(xf).to(dtype);
        const Tensor got = op(x);
        ASSERT_EQ(got.dtype(), dtype) << what;
        expect_same_values(got.to_vector<double>(), want.to_vector<double>(), what);
        Tensor xg = x.detach().requires_grad_();
        expect_same_values(op(xg).to_vector<double>(), want.to_vector<double>(),
                           what + " recording its gradient");
      }
    }
  }
}

TEST_P(Half, SafetensorsRoundTripKeepsEveryBit) {
  const auto path = std::filesystem::temp_directory_path() /
                    fmt::format("tessera_half_{}_{}.safetensors", ::getpid(), device().str());
  std::map<std::string, Tensor> tensors;
  for (Dtype dtype : kHalfTypes) {
    const std::vector<double> values = edge_values(dtype);
    tensors[std::string(dtype_name(dtype))] =
        from_vector(values, {static_cast<std::int64_t>(values.size())}, {dtype, device()});
  }
  save_safetensors(path, tensors);
  const SafetensorsFile file = load_safetensors(path, device());
  for (Dtype dtype : kHalfTypes) {
    const std::string name(dtype_name(dtype));
    const Tensor& back = file.tensors.at(name);
    EXPECT_EQ(back.dtype(), dtype);
    EXPECT_EQ(back.device(), device());
    expect_same_values(back.to_vector<double>(), tensors[name].to_vector<double>(), name);
  }
  expect_throw_with<NonFiniteError>(
      [&] { save_safetensors(path, tensors, {}, {.allow_non_finite = false}); },
      {"[save_safetensors]", "non-finite", "set SafetensorsSaveOptions::allow_non_finite to true"});
  std::filesystem::remove(path);
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Half);

}  // namespace
}  // namespace tessera
