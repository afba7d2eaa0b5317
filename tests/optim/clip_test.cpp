// clip_grad_norm_: the scaling and returned norm, and a whole training step (forward,
// backward, clip, step, zero_grad) that copies nothing and never waits.
#include <functional>
#include <memory>

#include "support/device_test.h"
#include "tessera/optim/adam.h"
#include "tessera/optim/clip.h"
#include "tessera/optim/sgd.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_close;

class ClipGradNorm : public DeviceTest {};

TEST_P(ClipGradNorm, ScalesByTheGlobalNorm) {
  Tensor a = zeros({2}, device()).requires_grad_();
  Tensor b = zeros({1}, {kFloat64, device()}).requires_grad_();
  Tensor none = zeros({4}, device()).requires_grad_();  // no grad: skipped
  a.set_grad(tensor({3.0, 4.0}, device()));
  b.set_grad(tensor({12.0}, {kFloat64, device()}));
  const Tensor norm = optim::clip_grad_norm_({a, b, none}, 6.5);  // global norm 13
  EXPECT_EQ(norm.dim(), 0);
  EXPECT_EQ(norm.device(), device());
  EXPECT_NEAR(norm.item<double>(), 13.0, 1e-5);
  const double scale = 6.5 / (13.0 + 1e-6);
  expect_close(a.grad(), {3 * scale, 4 * scale}, 1e-6, 0);
  expect_close(b.grad(), {12 * scale}, 1e-6, 0);
  EXPECT_FALSE(none.grad().defined());
  // Below the limit the grads are unchanged (the scale clamps at 1).
  const Tensor again = optim::clip_grad_norm_({a, b}, 100.0);
  EXPECT_NEAR(again.item<double>(), 6.5, 1e-5);
  expect_close(a.grad(), {3 * scale, 4 * scale}, 1e-6, 0);
  // Nothing to clip: a zero norm.
  EXPECT_EQ(optim::clip_grad_norm_({none}, 1.0).item<double>(), 0.0);
}

TEST_P(ClipGradNorm, HalfGradientsWhoseNormPassesTheHalfRangeAreScaledNotZeroed) {
  for (const Dtype dtype : {kFloat16, kBFloat16}) {
    Tensor w = zeros({4}, {dtype, device()}).requires_grad_();
    w.set_grad(full({4}, 150.0, {dtype, device()}));  // norm 300: squared, past float16's max
    const Tensor n = optim::clip_grad_norm_({w}, 1.0);
    EXPECT_EQ(n.dtype(), kFloat32) << dtype_name(dtype);
    EXPECT_NEAR(n.item<double>(), 300.0, 1e-3) << dtype_name(dtype);
    EXPECT_EQ(w.grad().dtype(), dtype);
    expect_close(w.grad(), {0.5, 0.5, 0.5, 0.5}, 4e-3, 0, std::string(dtype_name(dtype)));
  }
}

// The global norm is the norm of the per-parameter norms, not the root of their summed
// squares: a float32 norm of 2e19 squared is inf (the grads were zeroed, not clipped), and
// one of 1e-24 squared is 0.
TEST_P(ClipGradNorm, NormsWhoseSquaresLeaveFloat32ScaleTheGrads) {
  Tensor a = zeros({1}, device()).requires_grad_();
  a.set_grad(tensor({2e19}, device()));
  const Tensor one = optim::clip_grad_norm_({a}, 1.0);
  EXPECT_NEAR(one.item<double>() / 2e19, 1.0, 1e-6);
  expect_close(a.grad(), {1.0}, 1e-6, 0);
  Tensor b = zeros({1}, device()).requires_grad_(), c = zeros({2}, device()).requires_grad_();
  b.set_grad(tensor({3e19}, device()));
  c.set_grad(tensor({0.0, 4e19}, device()));
  const Tensor big = optim::clip_grad_norm_({b, c}, 10.0);  // global norm 5e19
  EXPECT_NEAR(big.item<double>() / 5e19, 1.0, 1e-6);
  expect_close(b.grad(), {6.0}, 1e-5, 0);
  expect_close(c.grad(), {0.0, 8.0}, 1e-5, 0);
  b.set_grad(tensor({3e-24}, device()));
  c.set_grad(tensor({0.0, 4e-24}, device()));
  const Tensor tiny = optim::clip_grad_norm_({b, c}, 1.0);
  EXPECT_NEAR(tiny.item<double>() / 5e-24, 1.0, 1e-6);
  expect_close(b.grad(), {3e-24}, 1e-6, 0);  // below the limit: unchanged
}

TEST_P(ClipGradNorm, TrainingStepsCopyNothingAndNeverWait) {
  manual_seed(5);
  const Tensor X = randn({64, 4}, device());
  const Tensor y = matmul(X, tensor({{1.0}, {-2.0}, {0.5}, {3.0}}, device())) + 0.7;
  using Make = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;
  const std::vector<Make> makers{
      [](auto p) {
        return std::make_unique<optim::SGD>(p, optim::SgdOptions{.lr = 0.1, .momentum = 0.9});
      },
      [](auto p) { return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 0.05}); },
      [](auto p) { return std::make_unique<optim::AdamW>(p); }};
  for (std::size_t which = 0; which < makers.size(); ++which) {
    Tensor w = zeros({4, 1}, device()).requires_grad_();
    Tensor b = zeros({1}, device()).requires_grad_();
    const auto opt = makers[which]({w, b});
    synchronize(device());
    reset_transfer_stats();
    Tensor norm;
    for (int step = 0; step < 5; ++step) {
      const Tensor loss = mean(pow(matmul(X, w) + b - y, 2.0));
      loss.backward();
      norm = optim::clip_grad_norm_(opt->params(), 1.0);
      opt->step();
      opt->zero_grad();
    }
    EXPECT_EQ(transfer_stats(), TransferStats{})
        << "optimizer " << which << ": " << transfer_stats();
    EXPECT_GT(norm.item<double>(), 0.0);  // reading it is the caller's choice (and a wait)
  }
}

TESSERA_INSTANTIATE_DEVICE_SUITE(ClipGradNorm);

}  // namespace
}  // namespace tessera
