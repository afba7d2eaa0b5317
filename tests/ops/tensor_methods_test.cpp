// The method forms (x.sum(), x.matmul(y), ...) are the ops themselves, and eye, diag and
// trace match a float64 reference on every device, with gradients.
#include <cmath>
#include <limits>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_throw_with;

class TensorMethods : public DeviceTest {};

void expect_equal(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.dtype(), want.dtype());
  EXPECT_EQ(got.device(), want.device());
  EXPECT_EQ(got.to(kFloat64).to_vector<double>(), want.to(kFloat64).to_vector<double>());
}

TEST_P(TensorMethods, MethodsAreTheFreeFunctions) {
  manual_seed(3);
  const Tensor x = randn({3, 4}, device()), y = randn({4, 2}, device());
  const Tensor p = rand({3, 4}, device()) + 0.1;
  expect_equal(x.sum(), sum(x));
  expect_equal(x.sum({1}, true), sum(x, {1}, true));
  expect_equal(x.mean(), mean(x));
  expect_equal(x.mean({0}), mean(x, {0}));
  expect_equal(x.max(), max(x));
  expect_equal(x.max({1}), max(x, {1}));
  expect_equal(x.min(), min(x));
  expect_equal(x.min({0}, true), min(x, {0}, true));
  expect_equal(x.argmax(), argmax(x));
  expect_equal(x.argmax(1), argmax(x, 1));
  expect_equal(x.argmin(), argmin(x));
  expect_equal(x.argmin(0, true), argmin(x, 0, true));
  expect_equal(x.norm(), norm(x));
  expect_equal(x.matmul(y), matmul(x, y));
  expect_equal(p.pow(1.5), pow(p, 1.5));
  expect_equal(x.neg(), neg(x));
  expect_equal(x.exp(), exp(x));
  expect_equal(p.log(), log(p));
  expect_equal(p.sqrt(), sqrt(p));
  expect_equal(x.abs(), abs(x));
  expect_equal(x.relu(), relu(x));
  expect_equal(x.sigmoid(), sigmoid(x));
  expect_equal(x.tanh(), tanh(x));
  expect_equal(x.softmax(1), softmax(x, 1));
  expect_equal(x.log_softmax(0), log_softmax(x, 0));
  // Chained, as LibTorch users write them; errors are the op's own.
  expect_equal(x.matmul(y).relu().sum(), sum(relu(matmul(x, y))));
  expect_throw_with<ShapeError>([&] { (void)x.matmul(x); }, {"[matmul]", "[3, 4]"});
}

TEST_P(TensorMethods, EyeDiagAndTraceMatchAFloat64Reference) {
  const Tensor i = eye(3, 4, device());
  EXPECT_EQ(i.shape(), Shape({3, 4}));
  EXPECT_EQ(i.dtype(), kFloat32);
  EXPECT_EQ(i.device(), device());
  const std::vector<float> ivals = i.to_vector<float>();
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 4; ++c)
      EXPECT_EQ(ivals[static_cast<std::size_t>(r * 4 + c)], r == c ? 1.0F : 0.0F);
  }
  EXPECT_EQ(eye(2, -1, {kInt64, device()}).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{1, 0, 0, 1}));
  EXPECT_EQ(eye(0, -1, device()).numel(), 0);
  // Tall, wide, one column, bool; errors name eye.
  for (const auto& [n, m] : {std::pair{5, 2}, std::pair{2, 5}, std::pair{4, 1}, std::pair{1, 1}}) {
    const std::vector<double> e = eye(n, m, {kFloat64, device()}).to_vector<double>();
    for (int r = 0; r < n; ++r) {
      for (int c = 0; c < m; ++c)
        EXPECT_EQ(e[static_cast<std::size_t>(r * m + c)], r == c) << n << "x" << m;
    }
  }
  EXPECT_EQ(eye(2, 3, {kBool, device()}).to_vector<bool>(),
            (std::vector<bool>{true, false, false, false, true, false}));
  expect_throw_with<DeviceError>([] { eye(3, -1, cpu(60)); }, {"[eye]", "cpu:60"});

  manual_seed(5);
  const Tensor a = randn({4, 3}, {kFloat64, device()});
  const std::vector<double> av = a.to_vector<double>();
  const std::vector<double> d = a.diag().to_vector<double>();
  ASSERT_EQ(d.size(), 3u);
  double tr = 0;
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(d[k], av[k * 3 + k]);
    tr += av[k * 3 + k];
  }
  EXPECT_NEAR(a.narrow(0, 0, 3).trace().item<double>(), tr, 1e-12);
  const Tensor v = tensor({2.0, -1.0, 0.5}, device());
  EXPECT_EQ(diag(v).to_vector<float>(), (std::vector<float>{2, 0, 0, 0, -1, 0, 0, 0, 0.5}));
  expect_equal(diag(diag(v)), v);
}

TEST_P(TensorMethods, DiagAndTraceDifferentiate) {
  Tensor a = tensor({{1.0, 2.0}, {3.0, 4.0}, {5.0, 6.0}}, device()).requires_grad_();
  a.trace().backward();
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{1, 0, 0, 1, 0, 0}));
  Tensor v = tensor({1.0, 2.0}, device()).requires_grad_();
  (diag(v) * tensor({{3.0, 5.0}, {7.0, 11.0}}, device())).sum().backward();
  EXPECT_EQ(v.grad().to_vector<float>(), (std::vector<float>{3, 11}));
  // Out of memory, the message names diag and the matrix (it named a comparison inside).
  const Tensor big = ones({1000}, device());
  synchronize(device());
  set_memory_limit(device(), memory_stats(device()).in_use + 1000000);
  expect_throw_with<OutOfMemoryError>([&] { (void)diag(big); },
                                      {"[diag] the 1000 x 1000 matrix of a 1000-value vector: ",
                                       "out of memory on " + device().str()});
  set_memory_limit(device(), SIZE_MAX);
}

TEST_P(TensorMethods, DiagKeepsNonFiniteValuesWhereTheyAreAndTheDtype) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // An inf or NaN off the diagonal stays off it (a product with eye gave NaN).
  EXPECT_EQ(diag(tensor({{1.0, inf}, {2.0, 3.0}}, device())).to_vector<float>(),
            (std::vector<float>{1, 3}));
  EXPECT_EQ(tensor({{1.0, nan}, {2.0, 3.0}}, device()).trace().item<float>(), 4.0F);
  const std::vector<float> m = diag(tensor({inf, -2.0}, device())).to_vector<float>();
  EXPECT_EQ(m, (std::vector<float>{std::numeric_limits<float>::infinity(), 0, 0, -2}));
  EXPECT_FALSE(std::signbit(m[1]));  // +0 off the diagonal
  // The diagonal of an integer or bool matrix keeps its dtype (a sum made it int64).
  const Tensor ints = tensor({{1, 2}, {3, 4}}, {kInt32, device()});
  expect_equal(diag(ints), tensor({1, 4}, {kInt32, device()}));
  const Tensor flags = tensor({{true, false}, {true, true}}, device());
  expect_equal(diag(flags), tensor({true, true}, device()));
  expect_equal(diag(tensor({true, false}, device())),
               tensor({{true, false}, {false, false}}, device()));
  EXPECT_EQ(diag(zeros({0, 3}, device())).numel(), 0);
  // diag of a matrix is a copy, not a view of it.
  Tensor sq = tensor({{1.0, 2.0}, {3.0, 4.0}}, device());
  Tensor d = diag(sq);
  d.fill_(9.0);
  EXPECT_EQ(sq.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
}

TEST_P(TensorMethods, WrongRanksAreRefused) {
  const Tensor cube = zeros({2, 2, 2}, device());
  expect_throw_with<ShapeError>([&] { (void)diag(cube); },
                                {"[diag]", "1-D tensor", "2-D tensor", "[2, 2, 2]"});
  expect_throw_with<ShapeError>([&] { (void)zeros({3}, device()).trace(); },
                                {"[trace] needs a 2-D tensor, got shape [3]"});
  expect_throw_with<Error>([&] { (void)eye(-2); }, {"[eye]", "must not be negative, got -2"});
  expect_throw_with<Error>([&] { (void)eye(3, -2); },
                           {"[eye]", "columns must not be negative, got -2", "pass -1"});
}

TESSERA_INSTANTIATE_DEVICE_SUITE(TensorMethods);

}  // namespace
}  // namespace tessera
