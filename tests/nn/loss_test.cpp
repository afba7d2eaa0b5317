// Losses against float64 references, their gradients against finite differences, and their
// errors.
#include <cmath>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_close;
using testing::expect_throw_with;
using testing::random_values;

// Per-example cross-entropy of row-major logits [n, c] in float64.
std::vector<double> reference_cross_entropy(const std::vector<double>& x,
                                            const std::vector<std::int64_t>& t, int n, int c) {
  std::vector<double> out(n);
  for (int i = 0; i < n; ++i) {
    double mx = -INFINITY, s = 0;
    for (int k = 0; k < c; ++k) mx = std::max(mx, x[i * c + k]);
    for (int k = 0; k < c; ++k) s += std::exp(x[i * c + k] - mx);
    out[i] = std::log(s) + mx - x[i * c + t[i]];
  }
  return out;
}

class Losses : public DeviceTest {};

TEST_P(Losses, CrossEntropyMatchesReferenceAndIsStable) {
  const Device d = device();
  const int n = 37, c = 10;
  std::vector<double> x = random_values(n * c, 3, -5, 5);
  x[0] = 1000;  // a logit that overflows a naive exp
  x[c + 1] = -1000;
  std::vector<std::int64_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 7) % c;
  const auto expected = reference_cross_entropy(x, t, n, c);
  for (Dtype dtype : {kFloat32, kFloat64}) {
    const Tensor logits = from_vector(x, {n, c}, {dtype, d});
    const Tensor targets = from_vector(t, {n}, d);
    const double tol = dtype == kFloat32 ? 1e-5 : 1e-12;
    expect_close(nn::cross_entropy(logits, targets, nn::Reduction::kNone), expected, tol, tol);
    double total = 0;
    for (double v : expected) total += v;
    expect_close(nn::cross_entropy(logits, targets, nn::Reduction::kSum), {total}, tol, tol);
    expect_close(nn::cross_entropy(logits, targets), {total / n}, tol, tol);
    // int32 class indices work the same.
    expect_close(nn::cross_entropy(logits, targets.to(kInt32)), {total / n}, tol, tol);
  }
}

TEST_P(Losses, CrossEntropyGradientIsSoftmaxMinusOneHot) {
  const Device d = device();
  const int n = 5, c = 4;
  const std::vector<double> x = random_values(n * c, 9, -2, 2);
  const std::vector<std::int64_t> t{3, 0, 1, 1, 2};
  const Tensor logits = from_vector(x, {n, c}, {kFloat64, d}).requires_grad_();
  const Tensor targets = from_vector(t, {n}, d);
  nn::cross_entropy(logits, targets).backward();
  // Central differences of the float64 reference.
  const double eps = 1e-6;
  std::vector<double> numeric(n * c);
  for (int k = 0; k < n * c; ++k) {
    auto plus = x, minus = x;
    plus[k] += eps;
    minus[k] -= eps;
    double lp = 0, lm = 0;
    for (double v : reference_cross_entropy(plus, t, n, c)) lp += v / n;
    for (double v : reference_cross_entropy(minus, t, n, c)) lm += v / n;
    numeric[k] = (lp - lm) / (2 * eps);
  }
  expect_close(logits.grad(), numeric, 1e-5, 1e-8);
  // A non-contiguous view of logits gets its gradient through the view.
  const Tensor wide = from_vector(x, {c, n}, {kFloat64, d}).requires_grad_();
  nn::cross_entropy(wide.t(), targets, nn::Reduction::kSum).backward();
  EXPECT_EQ(wide.grad().shape(), Shape({c, n}));
}

// The one backward kernel of each reduction: the mean's gradient divided by n, the sum's as
// it comes, and per-sample gradients read through their strides (a column of a matrix here)
// or broadcast from one value (stride 0), never copied.
TEST_P(Losses, CrossEntropyGradientOfEachReductionAndOfAStridedGrad) {
  const Device d = device();
  const int n = 7, c = 5;
  const std::vector<double> x = random_values(n * c, 21, -3, 3);
  std::vector<std::int64_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 3) % c;
  // (softmax - one-hot) of each row, in float64.
  std::vector<double> base(n * c);
  for (int i = 0; i < n; ++i) {
    double mx = -INFINITY, s = 0;
    for (int k = 0; k < c; ++k) mx = std::max(mx, x[i * c + k]);
    for (int k = 0; k < c; ++k) s += std::exp(x[i * c + k] - mx);
    for (int k = 0; k < c; ++k) {
      base[i * c + k] = std::exp(x[i * c + k] - mx) / s - (t[i] == k ? 1 : 0);
    }
  }
  const std::vector<double> per_sample = random_values(2 * n, 22, -2, 2);
  const Tensor targets = from_vector(t, {n}, d);
  for (Dtype dtype : {kFloat32, kFloat64}) {
    const double tol = dtype == kFloat32 ? 1e-6 : 1e-13;
    const auto scaled = [&](auto weight) {
      std::vector<double> out(n * c);
      for (int i = 0; i < n * c; ++i) out[i] = base[i] * weight(i / c);
      return out;
    };
    Tensor logits = from_vector(x, {n, c}, {dtype, d}).requires_grad_();
    nn::cross_entropy(logits, targets).backward(full({}, 3.0, {dtype, d}));
    expect_close(logits.grad(), scaled([&](int) { return 3.0 / n; }), tol, tol, "mean");
    logits = from_vector(x, {n, c}, {dtype, d}).requires_grad_();
    nn::cross_entropy(logits, targets, nn::Reduction::kSum).backward();
    expect_close(logits.grad(), scaled([](int) { return 1.0; }), tol, tol, "sum");
    logits = from_vector(x, {n, c}, {dtype, d}).requires_grad_();
    const Tensor column = from_vector(per_sample, {n, 2}, {dtype, d}).select(1, 1);
    ASSERT_EQ(column.stride(0), 2);
    nn::cross_entropy(logits, targets, nn::Reduction::kNone).backward(column);
    expect_close(logits.grad(), scaled([&](int i) { return per_sample[2 * i + 1]; }), tol, tol,
                 "a column's per-sample gradients");
    logits = from_vector(x, {n, c}, {dtype, d}).requires_grad_();
    nn::cross_entropy(logits, targets, nn::Reduction::kNone)
        .backward(full({1}, -0.5, {dtype, d}).expand({n}));
    expect_close(logits.grad(), scaled([](int) { return -0.5; }), tol, tol,
                 "one value for every sample");
  }
}

// ImageNet-sized rows in float32, through the vectorized kernel (16 lanes and a tail): the
// loss and the gradient (softmax - one-hot) against float64, with an -inf logit (its
// probability exactly 0, so its gradient too), logits far below the max, and a max in the
// tail.
TEST_P(Losses, Float32CrossEntropyOfLongRowsMatchesReference) {
  const int n = 6, c = 1003;
  std::vector<double> x = random_values(n * c, 17, -8, 8);
  x[0 * c + 11] = -INFINITY;
  for (int k = 0; k < 300; ++k) x[1 * c + k] = -120 + 0.1 * k;  // e^(x - max): denormals, 0
  x[2 * c + c - 1] = 30;
  const std::vector<std::int64_t> t{4, 500, c - 1, 0, 999, 16};
  const auto expected = reference_cross_entropy(x, t, n, c);
  const Tensor logits = from_vector(x, {n, c}, {kFloat32, device()}).requires_grad_();
  const Tensor targets = from_vector(t, {n}, device());
  const Tensor losses = nn::cross_entropy(logits, targets, nn::Reduction::kNone);
  expect_close(losses, expected, 1e-5, 1e-5, "losses");
  losses.sum().backward();
  std::vector<double> grad(n * c);
  for (int i = 0; i < n; ++i) {
    double mx = -INFINITY, s = 0;
    for (int k = 0; k < c; ++k) mx = std::max(mx, x[i * c + k]);
    for (int k = 0; k < c; ++k) s += std::exp(x[i * c + k] - mx);
    for (int k = 0; k < c; ++k) grad[i * c + k] = std::exp(x[i * c + k] - mx) / s - (k == t[i]);
  }
  // p - 1 for a p within 6e-8 of 1 is 0 or -6e-8 in float: the absolute tolerance.
  expect_close(logits.grad(), grad, 2e-6, 1e-7, "gradient");
  EXPECT_EQ(logits.grad().to_vector<double>()[11], 0.0) << "the -inf logit's gradient";
}

TEST_P(Losses, CrossEntropyOutOfRangeClassIsNaNWithoutAHostWait) {
  const Device d = device();
  const Tensor logits = zeros({2, 3}, d);
  const Tensor targets = from_vector(std::vector<std::int64_t>{1, 3}, {2}, d);
  reset_transfer_stats();
  const Tensor losses = nn::cross_entropy(logits, targets, nn::Reduction::kNone);
  EXPECT_EQ(transfer_stats().host_waits, 0u);
  const auto v = losses.to_vector<double>();
  EXPECT_NEAR(v[0], std::log(3.0), 1e-6);
  EXPECT_TRUE(std::isnan(v[1]));
  // Its gradient row is NaN as well (it was the finite softmax, which a step would take).
  Tensor l = zeros({2, 3}, d).requires_grad_();
  nn::cross_entropy(l, targets, nn::Reduction::kSum).backward();
  const auto g = l.grad().to_vector<double>();
  EXPECT_NEAR(g[1], -2.0 / 3.0, 1e-6) << "the valid row's target: 1/3 - 1";
  for (std::size_t i = 3; i < 6; ++i) EXPECT_TRUE(std::isnan(g[i])) << i;
}

TEST_P(Losses, MseRefusesIntegersByItsName) {
  const Tensor i = tensor({1, 2}, device());
  expect_throw_with<DtypeError>([&] { (void)nn::mse_loss(i, i); },
                                {"[mse_loss] needs floating input and target, got int64"});
}

TEST_P(Losses, CrossEntropyErrors) {
  const Device d = device();
  const Tensor logits = zeros({4, 3}, d);
  const Tensor targets = zeros({4}, {kInt64, d});
  expect_throw_with<ShapeError>(
      [&] {
        nn::cross_entropy(zeros({4, 3, 2}, d), targets);
      },
      {"[cross_entropy]", "[batch, classes]", "[4, 3, 2]"});
  expect_throw_with<ShapeError>(
      [&] {
        nn::cross_entropy(logits, zeros({5}, {kInt64, d}));
      },
      {"targets must be [batch] = [4]", "[5]"});
  expect_throw_with<DtypeError>([&] { nn::cross_entropy(logits, zeros({4}, d)); },
                                {"integer dtype", "float32"});
  expect_throw_with<DtypeError>(
      [&] {
        nn::cross_entropy(zeros({4, 3}, {kInt64, d}), targets);
      },
      {"logits must be floating"});
  if (available_devices().size() > 1) {
    const Device other =
        available_devices()[0] == d ? available_devices()[1] : available_devices()[0];
    expect_throw_with<DeviceMismatchError>(
        [&] {
          nn::cross_entropy(logits, zeros({4}, {kInt64, other}));
        },
        {"[cross_entropy]"});
  }
}

TEST_P(Losses, MseMatchesReferenceAndRefusesBroadcasting) {
  const Device d = device();
  const auto a = random_values(12, 1), b = random_values(12, 2);
  const Tensor x = from_vector(a, {3, 4}, {kFloat64, d}).requires_grad_();
  const Tensor y = from_vector(b, {3, 4}, {kFloat64, d});
  double total = 0;
  std::vector<double> grad(12);
  for (int i = 0; i < 12; ++i) {
    total += (a[i] - b[i]) * (a[i] - b[i]);
    grad[i] = 2 * (a[i] - b[i]) / 12;
  }
  const Tensor loss = nn::mse_loss(x, y);
  expect_close(loss, {total / 12}, 1e-12, 1e-12);
  loss.backward();
  expect_close(x.grad(), grad, 1e-12, 1e-12);
  expect_close(nn::mse_loss(x, y, nn::Reduction::kSum), {total}, 1e-12, 1e-12);
  expect_throw_with<ShapeError>(
      [&] {
        nn::mse_loss(x, zeros({4}, {kFloat64, d}));
      },
      {"[mse_loss]", "[3, 4]", "[4]"});
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Losses);

}  // namespace
}  // namespace tessera
