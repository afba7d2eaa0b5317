// The elementwise parity table: every op on every device against a float64 host reference,
// on random inputs, contiguous and not, with broadcasting edge cases.
#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <limits>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_close;
using testing::expect_throw_with;
using testing::random_values;

class Elementwise : public DeviceTest {};

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double lo, hi;
};

const std::vector<UnaryCase>& unary_cases() {
  static const std::vector<UnaryCase> cases = {
      {"neg", [](const Tensor& x) { return -x; }, [](double x) { return -x; }, -3, 3},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, -5, 5},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, 0.01,
       10},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 0,
       10},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::abs(x); }, -3, 3},
      {"relu", [](const Tensor& x) { return relu(x); },
       [](double x) { return x != x || x > 0 ? x : 0; }, -3, 3},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); },
       [](double x) { return 1 / (1 + std::exp(-x)); }, -8, 8},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, -4,
       4},
      {"pow2.5", [](const Tensor& x) { return pow(x, 2.5); },
       [](double x) { return std::pow(x, 2.5); }, 0, 3},
  };
  return cases;
}

TEST_P(Elementwise, UnaryOpsMatchReference) {
  for (Dtype dtype : {kFloat32, kFloat64}) {
    for (const UnaryCase& c : unary_cases()) {
      const auto values = random_values(300, 7, c.lo, c.hi);
      const Tensor x = from_vector(values, {20, 15}, {dtype, device()});
      const auto held = x.to_vector<double>();
      std::vector<double> expected(held.size());
      for (std::size_t i = 0; i < held.size(); ++i) expected[i] = c.ref(held[i]);
      const double rtol = dtype == kFloat32 ? 2e-6 : 1e-14;
      expect_close(c.op(x), expected, rtol, rtol, c.name);
      // Non-contiguous input: the transpose.
      const Tensor xt = x.t();
      std::vector<double> expected_t;
      for (int j = 0; j < 15; ++j)
        for (int i = 0; i < 20; ++i) expected_t.push_back(expected[i * 15 + j]);
      expect_close(c.op(xt), expected_t, rtol, rtol, std::string(c.name) + " (transposed)");
      EXPECT_EQ(c.op(x).dtype(), dtype);
    }
  }
}

struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<double(double, double)> ref;
};

const std::vector<BinaryCase>& binary_cases() {
  static const std::vector<BinaryCase> cases = {
      {"add", [](const Tensor& a, const Tensor& b) { return a + b; },
       [](double a, double b) { return a + b; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; },
       [](double a, double b) { return a - b; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; },
       [](double a, double b) { return a * b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; },
       [](double a, double b) { return a / b; }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
       [](double a, double b) { return std::max(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
       [](double a, double b) { return std::min(a, b); }},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(abs(a) + 0.5, b); },
       [](double a, double b) { return std::pow(std::abs(a) + 0.5, b); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return a < b; },
       [](double a, double b) { return double(a < b); }},
      {"ge", [](const Tensor& a, const Tensor& b) { return a >= b; },
       [](double a, double b) { return double(a >= b); }},
      {"eq", [](const Tensor& a, const Tensor& b) { return a == b; },
       [](double a, double b) { return double(a == b); }},
  };
  return cases;
}

// The reference of op over broadcast shapes, computed on the host.
std::vector<double> broadcast_ref(const std::vector<double>& a, const Shape& sa,
                                  const std::vector<double>& b, const Shape& sb, const Shape& out,
                                  const std::function<double(double, double)>& f) {
  auto index_of = [](const Shape& s, const Shape& o, std::int64_t flat) {
    std::int64_t idx = 0, stride = 1;
    for (int d = o.size() - 1; d >= 0; --d) {
      const std::int64_t coord = flat % o[d];
      flat /= o[d];
      const int sd = d - (o.size() - s.size());
      if (sd >= 0) {
        idx += (s[sd] == 1 ? 0 : coord) * stride;
        stride *= s[sd];
      }
    }
    return idx;
  };
  std::vector<double> r(out.numel());
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    r[i] = f(a[index_of(sa, out, i)], b[index_of(sb, out, i)]);
  }
  return r;
}

TEST_P(Elementwise, BinaryOpsBroadcastLikeNumpy) {
  const std::vector<std::tuple<Shape, Shape, Shape>> shapes = {
      {{4, 5}, {4, 5}, {4, 5}},
      {{4, 5}, {5}, {4, 5}},
      {{4, 1}, {1, 5}, {4, 5}},
      {{3, 1, 5}, {4, 1}, {3, 4, 5}},
      {{}, {2, 3}, {2, 3}},
      {{0, 3}, {3}, {0, 3}},
      {{2, 1, 3}, {2, 0, 1}, {2, 0, 3}},
      {{300, 200}, {200}, {300, 200}},  // large: parallel path
  };
  for (Dtype dtype : {kFloat32, kFloat64}) {
    for (const BinaryCase& c : binary_cases()) {
      for (const auto& [sa, sb, so] : shapes) {
        const Tensor a = from_vector(random_values(sa.numel(), 1), sa, {dtype, device()});
        const Tensor b = from_vector(random_values(sb.numel(), 2), sb, {dtype, device()});
        const Tensor out = c.op(a, b);
        ASSERT_EQ(out.shape(), so) << c.name;
        const double tol = dtype == kFloat32 ? 2e-6 : 1e-14;
        expect_close(out,
                     broadcast_ref(a.to_vector<double>(), sa, b.to_vector<double>(), sb, so, c.ref),
                     tol, tol, std::string(c.name) + " " + sa.str() + " " + sb.str());
      }
    }
  }
}

TEST_P(Elementwise, NonContiguousOperands) {
  const Tensor base = from_vector(random_values(24, 3), {4, 6}, {kFloat64, device()});
  const Tensor a = base.slice(1, 0, 6, 2);        // [4, 3], strides (6, 2)
  const Tensor b = base.t().narrow(0, 1, 3).t();  // [4, 3], strides (1, 6)... transposed
  const auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> expected(12);
  for (int i = 0; i < 12; ++i) expected[i] = av[i] * bv[i] + 1;
  expect_close(a * b + 1.0, expected, 1e-14, 1e-14);
}

// Transposed and permuted operands of 16 or more along two dimensions are walked in tiles on
// CPU devices (Note [Tiled walks]), with sizes that leave partial tiles. The reference
// indexes the contiguous bases by hand, so no copy under test makes it.
void tiled_operands_match_reference(Device device, std::int64_t R, std::int64_t C) {
  const auto av = random_values(R * C, 11, -3, 3), bv = random_values(R * C, 12, -3, 3);
  const auto rv = random_values(R, 13, -3, 3);
  auto at_t = [&](const std::vector<double>& v, std::int64_t i, std::int64_t j) {
    return v[j * C + i];  // element [i, j] of the transpose
  };
  for (Dtype dtype : {kFloat32, kFloat64}) {
    const double tol = dtype == kFloat32 ? 2e-6 : 1e-14;
    const Tensor a = from_vector(av, {R, C}, {dtype, device});
    const Tensor b = from_vector(bv, {R, C}, {dtype, device});
    const Tensor row = from_vector(rv, {R}, {dtype, device});
    const Tensor ac = a.t().contiguous();  // [C, R], contiguous
    for (const UnaryCase& c : unary_cases()) {
      const auto vals = random_values(R * C, 14, c.lo, c.hi);
      const Tensor x = from_vector(vals, {R, C}, {dtype, device});
      std::vector<double> expected;
      for (std::int64_t i = 0; i < C; ++i)
        for (std::int64_t j = 0; j < R; ++j) expected.push_back(c.ref(at_t(vals, i, j)));
      expect_close(c.op(x.t()), expected, tol, tol, std::string(c.name) + " of a.t()");
    }
    std::vector<double> sum_tt, prod_ct, scaled, picked;
    for (std::int64_t i = 0; i < C; ++i) {
      for (std::int64_t j = 0; j < R; ++j) {
        sum_tt.push_back(at_t(av, i, j) + at_t(bv, i, j));
        prod_ct.push_back(at_t(av, i, j) * at_t(bv, i, j));
        scaled.push_back(at_t(av, i, j) * rv[j]);
        picked.push_back(at_t(av, i, j) > 0 ? at_t(av, i, j) : at_t(bv, i, j));
      }
    }
    expect_close(a.t() + b.t(), sum_tt, tol, tol, "a.t() + b.t()");
    expect_close(ac * b.t(), prod_ct, tol, tol, "contiguous * b.t()");
    expect_close(a.t() * row, scaled, tol, tol, "a.t() * a broadcast row");
    expect_close(where(a.t() > 0, a.t(), b.t()), picked, tol, tol, "where over transposes");
    expect_close(a.t().to(kFloat64), ac.to(kFloat64).to_vector<double>(), 0, 0,
                 "a.t() converted to float64");
    // In place on a transposed view: self is the operand walked across lines.
    Tensor base = a.clone();
    base.t().mul_(2.0).add_(b.t());
    std::vector<double> updated(R * C);
    for (std::int64_t k = 0; k < R * C; ++k) updated[k] = 2 * av[k] + bv[k];
    expect_close(base, updated, tol, tol, "a.t().mul_(2).add_(b.t())");
  }
}

TEST_P(Elementwise, TransposedAndPermutedOperandsOfTileSize) {
  // Bases [R, C]; their transposes are [C, R]. The second has several bands of rows and
  // blocks of columns, and is large enough for the pool.
  for (const auto& [R, C] : {std::pair<std::int64_t, std::int64_t>{50, 37}, {530, 70}}) {
    SCOPED_TRACE(fmt::format("[{}, {}]", R, C));
    tiled_operands_match_reference(device(), R, C);
  }
  // A permuted 3-D tensor, dense along its first dimension: the walk moves that dimension
  // next to the innermost.
  constexpr std::int64_t D0 = 20, D1 = 3, D2 = 17;
  const auto pv = random_values(D0 * D1 * D2, 15, -3, 3);
  const Tensor p = from_vector(pv, {D0, D1, D2}, {kFloat64, device()}).permute({2, 1, 0});
  std::vector<double> relu_p, exp_p;
  for (std::int64_t i = 0; i < D2; ++i) {
    for (std::int64_t j = 0; j < D1; ++j) {
      for (std::int64_t k = 0; k < D0; ++k) {
        const double v = pv[(k * D1 + j) * D2 + i];
        relu_p.push_back(v > 0 ? v : 0);
        exp_p.push_back(std::exp(v) + v);
      }
    }
  }
  expect_close(relu(p), relu_p, 0, 0, "relu of a permute");
  expect_close(exp(p) + p, exp_p, 1e-14, 1e-14, "exp(p) + p of a permute");
  expect_close(exp(p.to(kFloat32)) + p.to(kFloat32), exp_p, 2e-6, 2e-6,
               "exp(p) + p of a float32 permute");
}

TEST_P(Elementwise, ScalarOpsAndPromotion) {
  const Tensor i = tensor({1, 2, 3}, device());
  EXPECT_EQ(i.dtype(), kInt64);
  // An integer scalar keeps the integer dtype, a floating one makes it float32 (scalar.h):
  // a whole 128.0 kept a uint8 image's dtype, and image - 128.0 wrapped.
  EXPECT_EQ((i + 1).dtype(), kInt64);
  EXPECT_EQ((i + 1.0).dtype(), kFloat32);
  const Tensor image = tensor({0, 100, 200, 255}, {device(), kUInt8});
  EXPECT_EQ(((image - 128.0) / 128.0).to_vector<float>(),
            (std::vector<float>{-1.0f, -0.21875f, 0.5625f, 0.9921875f}));
  EXPECT_EQ((image * 2.0).to_vector<float>(), (std::vector<float>{0, 200, 400, 510}));
  EXPECT_EQ((image * 2).dtype(), kUInt8);
  EXPECT_EQ((tensor({1000000}, {device(), kInt32}) * 3000.0).item<double>(), 3e9);
  // Integers keep every bit past 2^53 (a double rounded them), INT64_MAX included; a bool
  // scalar keeps a bool tensor bool.
  const Tensor big = tensor({1LL, 9007199254740993LL}, device());
  EXPECT_EQ((big == 9007199254740993LL).to_vector<bool>(), (std::vector<bool>{false, true}));
  EXPECT_EQ((big - 9007199254740993LL).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{-9007199254740992LL, 0}));
  EXPECT_EQ(minimum(big, std::numeric_limits<std::int64_t>::max()).to_vector<std::int64_t>(),
            big.to_vector<std::int64_t>());
  const Tensor mask = tensor({true, false}, device());
  EXPECT_EQ((mask * false).dtype(), kBool);
  EXPECT_EQ(where(mask, mask, false).to_vector<bool>(), (std::vector<bool>{true, false}));
  // An exponent float32 does not hold is applied in float64.
  EXPECT_EQ(pow(full({1}, -1.0, device()), 16777217).item<float>(), -1.0f);
  EXPECT_EQ(pow(zeros({1}, {device(), kInt32}), 1e-50).item<float>(), 0.0f);
  EXPECT_EQ(maximum(i, 2.0).dtype(), kFloat32);
  EXPECT_EQ(maximum(i, 2).dtype(), kInt64);
  EXPECT_TRUE((tensor({(std::int64_t{1} << 53) + 1}, device()) != 9007199254740992.0).item<bool>())
      << "a whole value compares exactly in the integer dtype";
  EXPECT_EQ((i * 0.5).dtype(), kFloat32);
  EXPECT_EQ((i / 2.0).dtype(), kFloat32);  // true division
  EXPECT_EQ((i / i).dtype(), kFloat32);
  EXPECT_EQ((i + tensor({1.5}, device())).dtype(), kFloat32);
  EXPECT_EQ((tensor({1.0}, {kFloat32, device()}) + tensor({1.0}, {kFloat64, device()})).dtype(),
            kFloat64);
  EXPECT_EQ((i > 1.5).to_vector<bool>(), (std::vector<bool>{false, true, true}));
  // A fractional value against integers compares exactly (x < 2.5 is x <= 2), not in
  // float32, where 16777217 == 16777216.5.
  const Tensor wide = tensor({16777216LL, 16777217LL, (1LL << 40) + 1}, device());
  EXPECT_EQ((wide == 16777216.5).to_vector<bool>(), (std::vector<bool>{false, false, false}));
  EXPECT_EQ((wide != 16777216.5).to_vector<bool>(), (std::vector<bool>{true, true, true}));
  EXPECT_EQ((wide > 16777216.5).to_vector<bool>(), (std::vector<bool>{false, true, true}));
  EXPECT_EQ((wide >= 16777216.5).to_vector<bool>(), (std::vector<bool>{false, true, true}));
  EXPECT_EQ((wide < 16777216.5).to_vector<bool>(), (std::vector<bool>{true, false, false}));
  EXPECT_EQ((wide <= 1099511627776.5).to_vector<bool>(), (std::vector<bool>{true, true, false}));
  const Tensor top = tensor({2147483647}, {kInt32, device()});
  EXPECT_TRUE((top < 2147483647.5).item<bool>());
  EXPECT_FALSE((top > 2147483647.5).item<bool>());
  EXPECT_TRUE((tensor({true, false}, device()) > -0.5).to_vector<bool>()[1]);
  EXPECT_EQ((i * 0.5).to_vector<double>(), (std::vector<double>{0.5, 1, 1.5}));
  EXPECT_EQ((10 - i).to_vector<std::int64_t>(), (std::vector<std::int64_t>{9, 8, 7}));
  EXPECT_EQ((6.0 / i).to_vector<double>(), (std::vector<double>{6, 3, 2}));
  const Tensor b = tensor({true, false}, device());
  EXPECT_EQ(b.dtype(), kBool);
  EXPECT_EQ((b + 1).dtype(), kInt64);
  EXPECT_EQ((b + 1.0).dtype(), kFloat32);
  expect_throw_with<DtypeError>([&] { (void)(b - b); }, {"[sub]", "bool", ".to(kInt64)"});
  expect_throw_with<DtypeError>([&] { (void)(-b); }, {"[neg]", "bool"});
  EXPECT_EQ(exp(i).dtype(), kFloat32);
}

TEST_P(Elementwise, InPlaceOps) {
  Tensor x = ones({2, 3}, device());
  const Tensor row = tensor({1.0, 2.0, 3.0}, device());
  x.add_(row).mul_(2.0).sub_(1.0).div_(tensor({1.0, 3.0, 7.0}, device()));
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{3, 5.0f / 3.0f, 1, 3, 5.0f / 3.0f, 1}));
  Tensor view = x.narrow(1, 0, 1);
  view.fill_(9);
  EXPECT_EQ(x.to_vector<float>()[3], 9.0f);
  x.zero_();
  EXPECT_EQ(x.to_vector<float>(), std::vector<float>(6, 0.0f));
  // Aliasing in another layout reads from a copy.
  Tensor sq = arange(0, 4, 1, {kFloat32, device()}).reshape({2, 2});
  sq.add_(sq.t());
  EXPECT_EQ(sq.to_vector<float>(), (std::vector<float>{0, 3, 3, 6}));
  // A part of self that broadcasts over it, with self's strides and offset: its first row is
  // read for every row, also after it was written. 40000 rows reach the parallel loops.
  for (const std::int64_t rows : {2, 40000}) {
    Tensor b = ones({rows, 2}, {kFloat64, device()});
    b.sub_(b.narrow(0, 0, 1));
    EXPECT_EQ(b.sum().item<double>(), 0.0) << rows << " rows";
    Tensor c = arange(0.0, 6.0, 1.0, {kInt64, device()}).reshape({2, 3});
    c.add_(c.narrow(0, 0, 1));
    EXPECT_EQ(c.to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 2, 4, 3, 5, 7}));
  }
  Tensor xi = tensor({1, 2}, device());
  expect_throw_with<DtypeError>([&] { xi.div_(2.0); }, {"[div_]", "int64", "out-of-place"});
  expect_throw_with<DtypeError>(
      [&] {
        xi.add_(tensor({0.5, 0.5}, device()));
      },
      {"[add_]", "float32"});
  expect_throw_with<ShapeError>(
      [&] {
        row.clone().add_(ones({2, 3}, device()));
      },
      {"[add_]", "does not broadcast to self's shape [3]"});
  Tensor expanded = row.expand({2, 3});
  expect_throw_with<Error>([&] { expanded.add_(1.0); }, {"[add_]", "expanded tensor", ".clone()"});
  // An integer result cannot be stored in a bool tensor (add_ became a logical or).
  Tensor flags = tensor({true, false}, device());
  expect_throw_with<DtypeError>(
      [&] {
        flags.add_(tensor({1, 2}, device()));
      },
      {"[add_] the result is int64 but self is bool"});
  expect_throw_with<DtypeError>([&] { flags.add_(2.0); }, {"[add_]", "self is bool"});
  // copy_ keeps self's shape: a source that broadcasts past it is refused by name.
  expect_throw_with<ShapeError>(
      [&] {
        zeros({3}, device()).copy_(ones({2, 3}, device()));
      },
      {"[copy_] src's shape [2, 3] does not broadcast to self's shape [3]"});
  flags.add_(tensor({true, true}, device()));  // bool with bool stays allowed
  EXPECT_EQ(flags.to_vector<bool>(), (std::vector<bool>{true, true}));
}

// self op= a wider floating other computes in the wider dtype and rounds once, as PyTorch
// does: the operand was rounded to self's dtype first (1e-50 to 0 in float32, so 1e30 * it
// gave 0 and 1e-30 / it gave inf).
TEST_P(Elementwise, InPlaceWithAWiderOperandRoundsOnce) {
  const auto one = [&](double v, Dtype d) { return full({1}, v, {d, device()}); };
  Tensor a = one(1e30, kFloat32);
  a.mul_(one(1e-50, kFloat64));
  EXPECT_FLOAT_EQ(a.to_vector<float>()[0], 1e-20F);
  Tensor b = one(1e-30, kFloat32);
  b.div_(one(1e-50, kFloat64));
  EXPECT_FLOAT_EQ(b.to_vector<float>()[0], 1e20F);
  Tensor c = one(1.0, kFloat32);
  c.add_(one(0x1p-24 + 0x1p-50, kFloat64));  // above half an ulp of 1: rounds up
  EXPECT_EQ(c.to_vector<float>()[0], 1.0F + 0x1p-23F);
  Tensor i = one(7, kInt32);  // integer self: wraps as before
  i.add_(one(5, kInt64));
  EXPECT_EQ(i.to_vector<std::int32_t>()[0], 12);
}

TEST_P(Elementwise, WhereAndComparisons) {
  const Tensor x = tensor({-1.0, 0.5, 2.0}, device());
  EXPECT_EQ(where(x > 0.0, x, 0.0).to_vector<float>(), (std::vector<float>{0, 0.5, 2}));
  EXPECT_EQ(where(x > 0.0, -1.0, x).to_vector<float>(), (std::vector<float>{-1, -1, -1}));
  const Tensor m = where(tensor({true, false}, device()).view({2, 1}), x, x * 10.0);
  EXPECT_EQ(m.shape(), (Shape{2, 3}));
  EXPECT_EQ(m.to_vector<float>(), (std::vector<float>{-1, 0.5, 2, -10, 5, 20}));
  expect_throw_with<DtypeError>([&] { where(x, x, x); }, {"[where]", "condition must be bool"});
  EXPECT_EQ((x != x).to_vector<bool>(), (std::vector<bool>{false, false, false}));
  const Tensor nan = tensor({NAN, 1.0}, device());
  EXPECT_TRUE(std::isnan(maximum(nan, 0.0).to_vector<float>()[0]));
  // A scalar promotes as in arithmetic (Note [Scalar promotion]), never truncated.
  const Tensor cond = tensor({true, false}, device());
  const Tensor ints = tensor({1, 2}, device());
  const Tensor left = where(cond, ints, 0.5), right = where(cond, 0.5, ints);
  EXPECT_EQ(left.dtype(), kFloat32);
  EXPECT_EQ(left.to_vector<float>(), (std::vector<float>{1, 0.5}));
  EXPECT_EQ(right.to_vector<float>(), (std::vector<float>{0.5, 2}));
  EXPECT_EQ(where(cond, ints, 7).dtype(), kInt64);
  EXPECT_EQ(where(cond, ints, 7.0).dtype(), kFloat32);
  const Tensor bools = where(cond, tensor({true, true}, device()), 2);
  EXPECT_EQ(bools.dtype(), kInt64);
  EXPECT_EQ(bools.to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 2}));
  // A half tensor compares with the scalar as its dtype holds it, as a float32 one does.
  for (const Dtype half : {kBFloat16, kFloat16}) {
    const Tensor tenth = full({1}, 0.1, {device(), half});
    EXPECT_TRUE(eq(tenth, 0.1).item<bool>()) << dtype_name(half);
    EXPECT_FALSE(lt(tenth, 0.1).item<bool>()) << dtype_name(half);
    EXPECT_TRUE(le(tenth, 0.1).item<bool>()) << dtype_name(half);
  }
  EXPECT_TRUE(eq(tensor({1.0}, {device(), kBFloat16}), 1.001).item<bool>());
}

TEST_P(Elementwise, MaximumWithAScalarOutsideTheDtypeDifferentiates) {
  // The backward made a tensor of the scalar in a's dtype, which refused it after the
  // forward had run.
  Tensor x = tensor({1.0, 2.0}, device()).requires_grad_();
  sum(maximum(x, -1e300)).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{1, 1}));
  Tensor h = tensor({1.0, 2.0}, {device(), kFloat16}).requires_grad_();
  sum(minimum(h, 1e5)).backward();
  EXPECT_EQ(h.grad().to_vector<float>(), (std::vector<float>{1, 1}));
  Tensor t = tensor({1.0, 3.0}, device()).requires_grad_();
  sum(maximum(t, 1.0)).backward();  // a tie shares the slope
  EXPECT_EQ(t.grad().to_vector<float>(), (std::vector<float>{0.5, 1}));
}

TEST_P(Elementwise, ReluKeepsNan) {
  // relu(NaN) is NaN, as in PyTorch and IEEE max(x, 0): a zero would hide a divergence.
  for (Dtype dtype : {kFloat32, kFloat64}) {
    const Tensor x = tensor({NAN, -1.0, 2.0, -INFINITY}, {device(), dtype});
    const auto y = relu(x).to_vector<double>();
    EXPECT_TRUE(std::isnan(y[0])) << dtype_name(dtype);
    EXPECT_EQ(y[1], 0.0);
    EXPECT_EQ(y[2], 2.0);
    EXPECT_EQ(y[3], 0.0);
    // The non-contiguous path too.
    EXPECT_TRUE(std::isnan(relu(x.view({2, 2}).t()).to_vector<double>()[0]));
  }
}

TEST_P(Elementwise, UnaryOpsAtExtremeInputsMatchTheLibraryMath) {
  // Values where exp overflows or underflows (|x| near 88.7 and beyond), infinities, NaN and
  // signed zeros, repeated to 48 elements so that vectorized loops (16 floats wide on
  // AVX-512) see every one of them, not only a scalar tail.
  const std::vector<double> special = {-1e30, -1000, -100, -89,  -88.8,     -88.7,    -87.4,
                                       -87.3, -20,   -0.0, 0.0,  20,        87.3,     88.7,
                                       88.8,  100,   1000, 1e30, -INFINITY, INFINITY, NAN};
  std::vector<double> values;
  while (values.size() < 48) values.push_back(special[values.size() % special.size()]);
  for (Dtype dtype : {kFloat32, kFloat64}) {
    const Tensor x = from_vector(values, {48}, {dtype, device()});
    for (const UnaryCase& c : unary_cases()) {
      const std::vector<double> got = c.op(x).to_vector<double>();
      for (std::size_t i = 0; i < values.size(); ++i) {
        // The reference rounded to the dtype, as the op's result is.
        const double r = c.ref(values[i]);
        const double want = dtype == kFloat32 ? static_cast<double>(static_cast<float>(r)) : r;
        const std::string where = fmt::format("{}({}) in {}", c.name, values[i], dtype_name(dtype));
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(got[i])) << where << " is " << got[i];
        } else if (std::isinf(want)) {
          EXPECT_EQ(got[i], want) << where;
        } else {
          // exp's float32 kernel gives 2^-126 where the exact value is a denormal.
          const double tiny = dtype == kFloat32 ? 1.2e-38 : 0;
          EXPECT_NEAR(got[i], want, std::abs(want) * 4e-6 + tiny) << where;
        }
      }
    }
    // The gradients that come from the outputs (sigmoid, tanh) are 0 where those saturate.
    for (const auto& [name, op] :
         std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>>{
             {"sigmoid", [](const Tensor& t) { return sigmoid(t); }},
             {"tanh", [](const Tensor& t) { return tanh(t); }}}) {
      const Tensor leaf = from_vector(values, {48}, {dtype, device()}).requires_grad_();
      op(leaf).sum().backward();
      const std::vector<double> g = leaf.grad().to_vector<double>();
      for (std::size_t i = 0; i < values.size(); ++i) {
        if (std::isnan(values[i])) continue;
        EXPECT_TRUE(std::isfinite(g[i]) && g[i] >= 0)
            << name << "'s gradient at " << values[i] << " in " << dtype_name(dtype) << " is "
            << g[i];
      }
    }
  }
}

TEST_P(Elementwise, IntegerPowersAreExact) {
  // By squaring, not through double: 3^39 needs 62 bits; overflow wraps like multiplication.
  const Tensor base = tensor({3, -2, 10, 7, 0, 1, -1, -1}, device());
  const Tensor exponent = tensor({39, 5, 20, 0, 3, -4, -3, -2}, device());
  EXPECT_EQ(pow(base, exponent).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{4052555153018976267LL, -32, 7766279631452241920LL, 1, 0, 1,
                                       -1, 1}));
  EXPECT_EQ(pow(tensor({3}, device()), 39).item<std::int64_t>(), 4052555153018976267LL);
  // A negative power truncates toward zero: 0 for every base but 1 and -1, 0 included.
  EXPECT_EQ(pow(tensor({2, 0, -7}, {device(), kInt32}), tensor({-1, -1, -2}, {device(), kInt32}))
                .to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{0, 0, 0}));
  EXPECT_EQ(pow(tensor({5}, {device(), kUInt8}), 3).to_vector<std::uint8_t>(),
            (std::vector<std::uint8_t>{125}));
  expect_throw_with<DtypeError>([&] { pow(tensor({7}, device()), -1); },
                                {"[pow]", "int64", "-1", "to(kFloat32)", "(-1.0)"});
  EXPECT_FLOAT_EQ(pow(tensor({4}, device()), -1.0).item<float>(), 0.25f);
  EXPECT_EQ(pow(tensor({4}, device()), -0.5).to_vector<float>(), (std::vector<float>{0.5f}));
}

// float32 exp and tanh of contiguous tensors run vector_math.h's vectorized forms: within
// 2 ulp of the float64 value over their whole range, at the ends of each form's pieces
// (tanh's switch at 0.625, exp's overflow at ln(FLT_MAX) and its denormals below -87.3), with
// inf, NaN and tanh's -0 as std::exp and std::tanh give them. 4099 values: the vector body
// and a tail.
TEST_P(Elementwise, Float32ExpAndTanhMatchReferenceOverTheirRange) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> values = random_values(4000, 41, -100, 100);
  const auto small = random_values(60, 42, -1, 1);
  for (double v : small) values.push_back(v * 1e-3);
  for (double v :
       {0.0,  -0.0,  1e-30,        -1e-40,  0.6249, -0.6251, 0.625,  1.0,    9.0,    44.0,
        45.0, 88.72, 88.7228394,   88.7229, -87.3,  -87.4,   -100.0, -103.9, -104.0, -200.0,
        kInf, -kInf, std::nan(""), 1e-6,    -3e-5,  0.1,     -0.3,   20.0,   -2.5}) {
    values.push_back(v);
  }
  const Tensor x =
      from_vector(values, {static_cast<std::int64_t>(values.size())}, {kFloat32, device()});
  const auto held = x.to_vector<double>();
  const auto ex = exp(x).to_vector<double>(), th = tanh(x).to_vector<double>();
  constexpr double kUlp = 1.0 / (1 << 23), kLeastDenormal = 1.401298464324817e-45;
  for (std::size_t i = 0; i < held.size(); ++i) {
    const double v = held[i];
    const double want_exp = static_cast<float>(std::exp(v)), want_tanh = std::tanh(v);
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(ex[i]) && std::isnan(th[i]));
      continue;
    }
    // Relative to the float value, or one denormal step where it is a denormal.
    if (std::isinf(want_exp)) {
      EXPECT_EQ(ex[i], want_exp) << "exp(" << v << ")";
    } else {
      EXPECT_LE(std::abs(ex[i] - want_exp), 2 * kUlp * std::abs(want_exp) + kLeastDenormal)
          << "exp(" << v << ") = " << ex[i] << ", expected " << want_exp;
    }
    EXPECT_LE(std::abs(th[i] - want_tanh), 2 * kUlp * std::abs(want_tanh))
        << "tanh(" << v << ") = " << th[i] << ", expected " << want_tanh;
    EXPECT_EQ(std::signbit(th[i]), std::signbit(v)) << "tanh(" << v << ")'s sign";
  }
}

// float32 log of a contiguous tensor runs vector_math.h's vectorized form: within 1 ulp of
// the float64 value from the least denormal to FLT_MAX (4096 values spread over every
// binade, and the edges of the polynomial's range: sqrt(1/2), 1, 2), with -inf at both
// zeros, NaN below them and at NaN, inf at inf, as std::log.
TEST_P(Elementwise, Float32LogMatchesReferenceOverItsRange) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> values;
  const auto mantissas = random_values(4096, 43, 1, 2);
  for (std::size_t i = 0; i < mantissas.size(); ++i) {
    const int binade = static_cast<int>(i % 277) - 149;  // 2^-149 (denormal) to 2^127
    values.push_back(std::ldexp(mantissas[i], binade));
  }
  for (double v :
       {0.70710676908493042, 0.70710682868957520, 1.0, 1.0000001192092896, 0.99999994039535522, 2.0,
        0.5, 1.401298464324817e-45, 1.1754942e-38, 1.1754944e-38, 3.4028234663852886e38, kInf}) {
    values.push_back(v);
  }
  const std::vector<double> special = {0.0, -0.0, -1.0, -1e-40, -kInf, std::nan("")};
  values.insert(values.end(), special.begin(), special.end());
  const Tensor x =
      from_vector(values, {static_cast<std::int64_t>(values.size())}, {kFloat32, device()});
  const auto held = x.to_vector<double>();
  const auto got = log(x).to_vector<double>();
  for (std::size_t i = 0; i < held.size(); ++i) {
    const double v = held[i], want = std::log(v);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got[i])) << "log(" << v << ") = " << got[i];
    } else if (std::isinf(want)) {
      EXPECT_EQ(got[i], want) << "log(" << v << ")";
    } else {
      // One ulp of the float nearest the value (log never gives a denormal).
      int exponent = 0;
      std::frexp(static_cast<float>(want), &exponent);
      const double ulp = want == 0 ? 0 : std::ldexp(1.0, exponent - 24);
      EXPECT_LE(std::abs(got[i] - want), ulp)
          << "log(" << v << ") = " << got[i] << ", expected " << want;
    }
  }
}

// pow(x, 2 | 3 | 0.5 | -1 | 1) runs as multiplies, a sqrt or a division (Note [pow by a
// common exponent]); the values are pow's within its rounding, its special values (-0,
// +-inf, NaN, negatives under the root) exactly pow's, and the gradient pow's.
TEST_P(Elementwise, CommonPowersAreStdPows) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> values = random_values(200, 43, -30, 30);
  for (double v :
       {0.0, -0.0, kInf, -kInf, std::nan(""), 1e-30, -1e-41, 3e12, -5e20, 1.0, -1.0, 0.25, 1e300}) {
    values.push_back(v);
  }
  for (Dtype dtype : {kFloat32, kFloat64}) {
    const Tensor x =
        from_vector(values, {static_cast<std::int64_t>(values.size())}, {dtype, device()});
    const auto held = x.to_vector<double>();
    const double ulp = dtype == kFloat32 ? 1.0 / (1 << 23) : 1.0 / (1LL << 52);
    for (const double e : {2.0, 3.0, 0.5, -1.0, 1.0}) {
      const auto got = pow(x, e).to_vector<double>();
      for (std::size_t i = 0; i < held.size(); ++i) {
        // pow in the dtype's precision, from the float64 value (exact for these exponents
        // up to the one rounding to the dtype, a double cube's excepted).
        const double want =
            dtype == kFloat32 ? static_cast<float>(std::pow(held[i], e)) : std::pow(held[i], e);
        const std::string what = fmt::format("pow({}, {}) in {}", held[i], e, dtype_name(dtype));
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(got[i])) << what << " = " << got[i];
        } else if (std::isinf(want) || want == 0) {
          EXPECT_EQ(got[i], want) << what;
          EXPECT_EQ(std::signbit(got[i]), std::signbit(want)) << what << "'s sign";
        } else {
          // A float's square, root and reciprocal are correctly rounded, as the float64
          // value rounded to float is; a cube or a double may be an ulp off pow's.
          if (dtype == kFloat32 && e != 3.0) {
            EXPECT_EQ(got[i], want) << what;
          } else {
            EXPECT_LE(std::abs(got[i] - want), ulp * std::abs(want))
                << what << " = " << got[i] << ", expected " << want;
          }
        }
      }
    }
    // The gradients, from pow's own backward: 3x^2, -1/x^2, 0.5/sqrt(x).
    const Tensor leaf =
        from_vector(std::vector<double>{0.5, 2, 4}, {3}, {dtype, device()}).requires_grad_();
    (pow(leaf, 3.0) + pow(leaf, -1.0) + pow(leaf, 0.5) + pow(leaf, 2.0)).sum().backward();
    expect_close(leaf.grad(),
                 {3 * 0.25 - 4 + 0.5 / std::sqrt(0.5) + 1, 12 - 0.25 + 0.5 / std::sqrt(2.0) + 4,
                  48 - 1.0 / 16 + 0.25 + 8},
                 1e-6, 1e-6, "gradients");
  }
}

TEST_P(Elementwise, AbsOfNegativeZeroIsPositiveZero) {
  for (Dtype dtype : {kFloat32, kFloat64}) {
    const Tensor x = from_vector(std::vector<double>(40, -0.0), {40}, {dtype, device()});
    for (double v : abs(x).to_vector<double>()) {
      EXPECT_FALSE(std::signbit(v)) << "abs(-0.0) in " << dtype_name(dtype);
    }
  }
}

// int32 and int64 wrap as in PyTorch, without signed overflow (undefined; UBSan flags it).
TEST_P(Elementwise, SignedIntegersWrap) {
  constexpr std::int64_t kMax32 = 2147483647, kMin32 = -kMax32 - 1;
  const Tensor top = full({20}, static_cast<double>(kMax32), {kInt32, device()});
  const Tensor bottom = full({20}, static_cast<double>(kMin32), {kInt32, device()});
  EXPECT_EQ((top + 1).to_vector<std::int64_t>(), std::vector<std::int64_t>(20, kMin32));
  EXPECT_EQ((bottom - 1).to_vector<std::int64_t>(), std::vector<std::int64_t>(20, kMax32));
  EXPECT_EQ((top * 2).to_vector<std::int64_t>(), std::vector<std::int64_t>(20, -2));
  EXPECT_EQ((-bottom).to_vector<std::int64_t>(), std::vector<std::int64_t>(20, kMin32));
  EXPECT_EQ(abs(bottom).to_vector<std::int64_t>(), std::vector<std::int64_t>(20, kMin32));
  const Tensor big = full({20}, 9.2e18, {kInt64, device()});
  EXPECT_LT((big + big).to_vector<std::int64_t>()[0], 0);
}

// The float32 sigmoid of one value is the same at every position of a buffer (the vector
// body and its tail differed in the last bit), and e^x does not overflow before ln(FLT_MAX)
// (2^128 was made from the bits where e^88.5 is finite, and a sigmoid there was 0).
TEST_P(Elementwise, Float32SigmoidIsPositionIndependentAndExactNearItsEnds) {
  for (const std::int64_t n : {17, 33, 70, 2049}) {
    const std::vector<double> y = sigmoid(full({n}, -3.7, device())).to_vector<double>();
    for (std::int64_t i = 1; i < n; ++i) ASSERT_EQ(y[i], y[0]) << "n " << n << " element " << i;
  }
  for (const double x : {-88.0, -88.5, -88.7}) {
    const double y = sigmoid(full({32}, x, device())).to_vector<double>()[7];
    EXPECT_NEAR(y, 1.0 / (1.0 + std::exp(-x)), 1e-3 / (1.0 + std::exp(-x))) << x;
  }
}

// ReLU's slope at a NaN input passes the gradient, as PyTorch's threshold_backward (the
// output keeps the NaN); it was 0. Fused (float) and through where() alike.
TEST_P(Elementwise, ReluPassesTheGradientAtNan) {
  Tensor x =
      from_vector(std::vector<double>{NAN, -1, 2}, {3}, {kFloat32, device()}).requires_grad_();
  relu(x).sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 0, 1}));
}

TEST_P(Elementwise, BoolBytesFromTheHostMustBeBools) {
  // Any byte but 0 or 1 is refused, so where() never selects with an undefined bool.
  const unsigned char bytes[3] = {1, 0, 2};
  expect_throw_with<DtypeError>(
      [&] {
        from_vector(bytes, kBool, 3, {3}, {kBool, device()});
      },
      {"[from_vector]", "bool value 2 is the byte 2", "0 or 1"});
  const unsigned char good[3] = {1, 0, 1};
  const Tensor c = from_vector(good, kBool, 3, {3}, {kBool, device()});
  EXPECT_EQ(where(c, ones({3}, device()), 0.0).to_vector<float>(), (std::vector<float>{1, 0, 1}));
}

TEST_P(Elementwise, WhereWithAScalarNamesTheTensorOnAnotherDevice) {
  // The scalar, made a tensor on x's device, was blamed ("'self' is a 0-dim tensor: pass it
  // as a C++ scalar") although the user had passed one.
  if (num_cpu_devices() < 2 || device() != cpu(1)) GTEST_SKIP() << "needs cpu:1";
  const Tensor cond = tensor({true, false}, cpu(0));
  const Tensor x = ones({2}, device());
  expect_throw_with<DeviceMismatchError>([&] { where(cond, 1.0, x); },
                                         {"[where]", "condition on cpu:0, other on cpu:1"});
  expect_throw_with<DeviceMismatchError>([&] { where(cond, x, 1.0); },
                                         {"[where]", "condition on cpu:0, self on cpu:1"});
}

TEST_P(Elementwise, BroadcastErrorNamesShapes) {
  const Tensor a = zeros({2, 3}, device()), b = zeros({4}, device());
  expect_throw_with<ShapeError>(
      [&] { (void)(a + b); },
      {"[add] shapes [2, 3] and [4] cannot be broadcast", "dim -1", "sizes 3 and 4"});
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Elementwise);

}  // namespace
}  // namespace tessera
