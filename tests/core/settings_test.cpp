// Process-wide settings: defaults, round trips, that the CPU ignores the TF32 switch, and
// that TF32 matmul and convolution on every device stay within TF32's error of float64.
#include <gtest/gtest.h>

#include <vector>

#include "support/device_test.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

// Restores the default however a test ends, so tests stay independent.
struct Tf32Guard {
  ~Tf32Guard() { set_matmul_allow_tf32(false); }
};

TEST(Settings, MatmulTf32IsOffByDefault) { EXPECT_FALSE(matmul_allow_tf32()); }

TEST(Settings, MatmulTf32RoundTrips) {
  Tf32Guard guard;
  set_matmul_allow_tf32(true);
  EXPECT_TRUE(matmul_allow_tf32());
  set_matmul_allow_tf32(true);  // idempotent
  EXPECT_TRUE(matmul_allow_tf32());
  set_matmul_allow_tf32(false);
  EXPECT_FALSE(matmul_allow_tf32());
}

TEST(Settings, CpuMatmulIgnoresTf32) {
  Tf32Guard guard;
  manual_seed(7);
  const Tensor a = randn({33, 47}), b = randn({47, 29});
  const std::vector<float> exact = matmul(a, b).to_vector<float>();
  set_matmul_allow_tf32(true);
  EXPECT_EQ(matmul(a, b).to_vector<float>(), exact);
}

class Tf32 : public testing::DeviceTest {};

// Float32 matmul and conv2d (forward, grad_x, grad_weight) with the switch on and off, each
// against the same ops in float64: TF32's products keep about 10 mantissa bits (a GPU), the
// CPU stays exact float32.
TEST_P(Tf32, MatmulAndConvStayWithinItsErrorOfFloat64) {
  Tf32Guard guard;
  manual_seed(11);
  const Tensor a64 = randn({64, 300}, {kFloat64, device()}),
               b64 = randn({300, 48}, {kFloat64, device()});
  const Tensor x64 = randn({4, 32, 10, 10}, {kFloat64, device()});
  const Tensor w64 = randn({16, 32, 3, 3}, {kFloat64, device()});
  const auto run = [&](Dtype dtype) {
    const Tensor x = x64.detach().to(dtype).requires_grad_();
    const Tensor w = w64.detach().to(dtype).requires_grad_();
    const Tensor y = conv2d(x, w, {}, {.padding = {1, 1}});
    sum(mul(y, y)).backward();
    return std::vector<std::vector<double>>{
        matmul(a64.to(dtype), b64.to(dtype)).to_vector<double>(), y.to_vector<double>(),
        x.grad().to_vector<double>(), w.grad().to_vector<double>()};
  };
  const auto reference = run(kFloat64);
  const auto exact = run(kFloat32);
  set_matmul_allow_tf32(true);
  const auto tf32 = run(kFloat32);
  const char* names[] = {"matmul", "conv2d", "conv2d grad_x", "conv2d grad_weight"};
  for (std::size_t i = 0; i < reference.size(); ++i) {
    double scale = 0;  // errors are relative to the result's largest magnitude
    for (double v : reference[i]) scale = std::max(scale, std::abs(v));
    testing::expect_close(exact[i], reference[i], 0, 1e-5 * scale,
                          std::string(names[i]) + " float32");
    testing::expect_close(tf32[i], reference[i], 0, 1e-2 * scale, std::string(names[i]) + " TF32");
    if (device().is_cpu()) EXPECT_EQ(tf32[i], exact[i]) << names[i] << ": the CPU never uses TF32";
  }
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Tf32);

}  // namespace
}  // namespace tessera
