// AutocastGuard: the scope's rules (thread-local, nested, per device kind), which ops it runs
// in the half type and which it keeps in float32, and gradients in the parameters' dtype.
#include <thread>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_close;
using testing::expect_throw_with;
using testing::random_values;

TEST(Autocast, ScopeIsThreadLocalNestedAndPerDeviceKind) {
  EXPECT_FALSE(autocast_dtype(DeviceKind::kCpu).has_value());
  {
    AutocastGuard outer(DeviceKind::kCpu, kBFloat16);
    EXPECT_EQ(autocast_dtype(DeviceKind::kCpu), kBFloat16);
    EXPECT_FALSE(autocast_dtype(DeviceKind::kCuda).has_value());
    {
      AutocastGuard inner(DeviceKind::kCpu, kFloat16);
      EXPECT_EQ(autocast_dtype(DeviceKind::kCpu), kFloat16);
      {
        AutocastGuard off(DeviceKind::kCpu, kBFloat16, /*enabled=*/false);
        EXPECT_FALSE(autocast_dtype(DeviceKind::kCpu).has_value());
      }
      EXPECT_EQ(autocast_dtype(DeviceKind::kCpu), kFloat16);
    }
    EXPECT_EQ(autocast_dtype(DeviceKind::kCpu), kBFloat16);
    std::optional<Dtype> seen_elsewhere = kFloat32;
    std::thread([&] { seen_elsewhere = autocast_dtype(DeviceKind::kCpu); }).join();
    EXPECT_FALSE(seen_elsewhere.has_value()) << "another thread saw this thread's autocast";
  }
  EXPECT_FALSE(autocast_dtype(DeviceKind::kCpu).has_value());
  expect_throw_with<DtypeError>([] { AutocastGuard g(DeviceKind::kCpu, kFloat32); },
                                {"[AutocastGuard] autocasts to bfloat16 or float16, got float32"});
}

class Autocast : public DeviceTest {
 protected:
  DeviceKind other_kind() const { return device().is_cpu() ? DeviceKind::kCuda : DeviceKind::kCpu; }
};

TEST_P(Autocast, RunsMatmulLinearAndConvInTheHalfType) {
  for (Dtype half : {kBFloat16, kFloat16}) {
    const std::string what = std::string(dtype_name(half));
    const Tensor a = from_vector(random_values(8 * 16, 1), {8, 16}, {kFloat32, device()});
    const Tensor b = from_vector(random_values(16 * 4, 2), {16, 4}, {kFloat32, device()});
    const Tensor x =
        from_vector(random_values(2 * 3 * 6 * 6, 3), {2, 3, 6, 6}, {kFloat32, device()});
    const Tensor w =
        from_vector(random_values(4 * 3 * 3 * 3, 4), {4, 3, 3, 3}, {kFloat32, device()});
    {
      AutocastGuard other(other_kind(), half);  // another kind's scope changes nothing here
      EXPECT_EQ(matmul(a, b).dtype(), kFloat32);
    }
    AutocastGuard autocast(device().kind(), half);
    const Tensor c = matmul(a, b);
    EXPECT_EQ(c.dtype(), half) << what;
    {
      AutocastGuard off(device().kind(), half, false);
      // The same as casting by hand: the half values multiplied in float32, rounded once.
      EXPECT_EQ(c.to_vector<double>(), matmul(a.to(half), b.to(half)).to_vector<double>());
      EXPECT_EQ(matmul(a, b).dtype(), kFloat32);
    }
    EXPECT_EQ(matmul(a.to(kFloat64), b.to(kFloat64)).dtype(), kFloat64) << "float64 is kept";
    EXPECT_EQ(matmul(a.to(half), b).dtype(), half) << "mixed operands are cast too";
    const Tensor y = conv2d(x, w);
    EXPECT_EQ(y.dtype(), half);
    {
      AutocastGuard off(device().kind(), half, false);
      EXPECT_EQ(y.to_vector<double>(), conv2d(x.to(half), w.to(half)).to_vector<double>());
    }
    nn::Linear layer(16, 4);
    layer.to(device());
    EXPECT_EQ(layer(a).dtype(), half);
    // A half input into a float32 layer is fine under autocast.
    EXPECT_EQ(layer(a.to(half)).dtype(), half);
  }
}

TEST_P(Autocast, KeepsSoftmaxLossesAndReductionsInFloat32) {
  AutocastGuard autocast(device().kind(), kBFloat16);
  const Tensor h = from_vector(random_values(24, 5), {4, 6}, {kBFloat16, device()});
  EXPECT_EQ(softmax(h, 1).dtype(), kFloat32);
  EXPECT_EQ(log_softmax(h, 1).dtype(), kFloat32);
  EXPECT_EQ(sum(h).dtype(), kFloat32);
  EXPECT_EQ(mean(h, {1}).dtype(), kFloat32);
  EXPECT_EQ(norm(h).dtype(), kFloat32);
  EXPECT_EQ(nn::cross_entropy(h, tensor({0, 1, 2, 3}, {kInt64, device()})).dtype(), kFloat32);
  EXPECT_EQ(nn::mse_loss(h, zeros_like(h)).dtype(), kFloat32);
  // Whole: differences and squares in float32, not rounded to bfloat16 first (511^2 needs
  // 18 bits), with every reduction.
  const Tensor big = tensor({511.0, 298.0, 997.0}, {kBFloat16, device()});
  const Tensor none = nn::mse_loss(big, zeros_like(big), nn::Reduction::kNone);
  EXPECT_EQ(none.dtype(), kFloat32);
  const std::vector<double> v = big.to_vector<double>();  // as bfloat16 holds them
  expect_close(none, {v[0] * v[0], v[1] * v[1], v[2] * v[2]}, 1e-7, 0, "mse_loss, kNone");
  expect_close(nn::mse_loss(big, zeros_like(big)).reshape({1}),
               {(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]) / 3}, 1e-6, 0, "mse_loss, kMean");
  expect_close(softmax(h, 1), softmax(h.to(kFloat64), 1).to_vector<double>(), 1e-6, 1e-7,
               "softmax of bfloat16 values in float32");
  // Elementwise ops keep their operands' dtype.
  EXPECT_EQ(relu(h).dtype(), kBFloat16);
}

TEST_P(Autocast, GradientsComeBackInTheParametersDtype) {
  for (Dtype half : {kBFloat16, kFloat16}) {
    const std::string what = std::string(dtype_name(half));
    nn::Sequential net(nn::Linear(10, 16), nn::ReLU(), nn::Linear(16, 3));
    net.to(device());
    const Tensor x = from_vector(random_values(32 * 10, 6), {32, 10}, {kFloat32, device()});
    const Tensor t = from_vector(std::vector<std::int64_t>(32, 2), {32}, device());
    Tensor loss;
    {
      AutocastGuard autocast(device().kind(), half);
      loss = nn::cross_entropy(net(x), t);
    }
    EXPECT_EQ(loss.dtype(), kFloat32);
    loss.backward();
    // The float64 reference: the same net run on the half-rounded values.
    const auto params = net.parameters();
    std::vector<Tensor> p64;
    for (const Tensor& p : params) {
      ASSERT_TRUE(p.grad().defined());
      EXPECT_EQ(p.dtype(), kFloat32) << "autocast leaves the master weights float32";
      EXPECT_EQ(p.grad().dtype(), kFloat32) << what;
      p64.push_back(p.detach().to(half).to(kFloat64).requires_grad_());
    }
    const Tensor x64 = x.to(half).to(kFloat64);
    const Tensor h = relu(matmul(x64, p64[0].t()) + p64[1]);
    nn::cross_entropy(matmul(h, p64[2].t()) + p64[3], t).backward();
    const double tol = half == kBFloat16 ? 0.03 : 0.005;
    for (std::size_t i = 0; i < params.size(); ++i) {
      expect_close(params[i].grad(), p64[i].grad().to_vector<double>(), tol, tol,
                   what + " grad of parameter " + std::to_string(i));
    }
  }
}

TEST_P(Autocast, TrainsAnMlpToTheFloat32Loss) {
  // Two runs from the same start, float32 and bfloat16 autocast, on a separable problem.
  const Tensor x = from_vector(random_values(256 * 8, 7), {256, 8}, {kFloat32, device()});
  const Tensor labels =
      argmax(matmul(x, from_vector(random_values(8 * 4, 8), {8, 4}, {kFloat32, device()})), 1);
  std::vector<double> final_loss;
  for (bool autocast : {false, true}) {
    manual_seed(3);
    nn::Sequential net(nn::Linear(8, 32), nn::ReLU(), nn::Linear(32, 4));
    net.to(device());
    optim::SGD sgd(net.parameters(), {.lr = 0.5});
    Tensor loss;
    for (int step = 0; step < 100; ++step) {
      {
        AutocastGuard guard(device().kind(), kBFloat16, autocast);
        loss = nn::cross_entropy(net(x), labels);
      }
      sgd.zero_grad();
      loss.backward();
      sgd.step();
    }
    for (const Tensor& p : net.parameters()) EXPECT_EQ(p.dtype(), kFloat32);
    final_loss.push_back(loss.item<double>());
  }
  EXPECT_LT(final_loss[0], 0.3) << "the float32 run did not learn";
  EXPECT_NEAR(final_loss[1], final_loss[0], 0.05) << "bfloat16 autocast strayed from float32";
}

// A LazyLinear built by its first call under autocast takes the half input autocast made as
// autocast's, not as the model's dtype: its parameters are float32, as PyTorch's are, and the
// model still runs outside autocast.
TEST_P(Autocast, ALazyLayerBuiltUnderAutocastKeepsFloat32Parameters) {
  manual_seed(3);
  nn::Sequential net(nn::LazyLinear(8), nn::ReLU(), nn::LazyLinear(3));
  const Tensor x = randn({4, 5}, device());
  {
    AutocastGuard autocast(device().kind(), kBFloat16);
    EXPECT_EQ(net(x).dtype(), kBFloat16);
  }
  for (const auto& [name, p] : net.named_parameters()) EXPECT_EQ(p.dtype(), kFloat32) << name;
  EXPECT_EQ(net(x).dtype(), kFloat32);
}

// mse_loss under autocast widens its half operands only: a float64 operand keeps float64.
TEST_P(Autocast, MseLossKeepsAFloat64Operand) {
  const Tensor input =
      from_vector(std::vector<double>{1.0 + 1e-9, 2.0, 3.0}, {3}, {kFloat64, device()});
  const Tensor target = from_vector(std::vector<double>{1.0, 2.0, 3.0}, {3}, {kBFloat16, device()});
  AutocastGuard autocast(device().kind(), kBFloat16);
  const Tensor loss = nn::mse_loss(input, target);
  EXPECT_EQ(loss.dtype(), kFloat64);
  EXPECT_NEAR(loss.item<double>(), 1e-18 / 3.0, 1e-24);
  EXPECT_EQ(nn::mse_loss(input.to(kBFloat16), target).dtype(), kFloat32);
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Autocast);

}  // namespace
}  // namespace tessera
