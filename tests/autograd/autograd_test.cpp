// Autograd behaviour: accumulation, leaves, no-grad scopes, in-place refusal, errors, and
// learning a known function with a training loop that stays on the device.
#include <fmt/format.h>

#include <cmath>
#include <thread>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_throw_with;

class Autograd : public DeviceTest {};

TEST_P(Autograd, GradientsAccumulateUntilCleared) {
  Tensor w = tensor({1.0, 2.0}, device()).requires_grad_();
  EXPECT_TRUE(w.is_leaf());
  EXPECT_FALSE(w.grad().defined());
  sum(w * w).backward();
  sum(w * 3.0).backward();
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{5, 7}));  // 2w + 3
  EXPECT_EQ(w.grad().device(), device());
  w.set_grad(Tensor());
  EXPECT_FALSE(w.grad().defined());
}

TEST_P(Autograd, SharedSubexpressionsSumTheirGradients) {
  Tensor x = tensor({2.0}, device()).requires_grad_();
  const Tensor y = x * x;      // used twice below
  const Tensor z = y * y + y;  // x^4 + x^2
  z.backward(ones_like(z));
  EXPECT_FLOAT_EQ(x.grad().item<float>(), 4 * 8 + 2 * 2);
  EXPECT_FALSE(z.is_leaf());
  EXPECT_TRUE(z.requires_grad());
}

TEST_P(Autograd, NoGradAndDetachRecordNothing) {
  Tensor w = ones({2}, device()).requires_grad_();
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(grad_enabled());
    EXPECT_FALSE((w * 2.0).requires_grad());
    w.sub_(1.0);  // allowed: this is how optimizers update
  }
  EXPECT_TRUE(grad_enabled());
  EXPECT_FALSE(w.detach().requires_grad());
  EXPECT_TRUE(w.detach().shares_storage(w));
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{0, 0}));
  // Ops on tensors that do not require grad are not recorded either.
  EXPECT_FALSE((ones({2}, device()) + 1.0).requires_grad());
}

TEST_P(Autograd, ErrorsNameTheFix) {
  Tensor w = ones({2}, device()).requires_grad_();
  expect_throw_with<Error>([&] { w.add_(1.0); },
                           {"[add_] cannot write in place", "requires grad", "NoGradGuard"});
  Tensor y = w * 2.0;
  expect_throw_with<Error>([&] { y.mul_(2.0); }, {"[mul_]"});
  expect_throw_with<Error>([&] { zeros({2}, device()).copy_(w); }, {"[copy_]"});
  expect_throw_with<ShapeError>([&] { y.backward(); },
                                {"[backward] without a gradient argument", "shape [2]"});
  expect_throw_with<Error>([&] { ones({1}, device()).backward(); },
                           {"[backward] this tensor does not require grad"});
  expect_throw_with<DtypeError>(
      [&] {
        tensor({1, 2}, device()).requires_grad_();
      },
      {"[requires_grad_]", "int64"});
  expect_throw_with<Error>([&] { y.requires_grad_(); }, {"[requires_grad_]", "only leaves"});
  Tensor loss = sum(w * w);
  loss.backward();
  expect_throw_with<Error>([&] { loss.backward(); }, {"already used", "retain_graph"});
  Tensor kept = sum(w * w);
  kept.backward(Tensor(), /*retain_graph=*/true);
  kept.backward();  // fine the second time
  // A pass reaching a freed part refuses before it adds anything (the other branch was added).
  Tensor e = exp(w);
  sum(e).backward();
  const std::vector<float> before = w.grad().to_vector<float>();
  expect_throw_with<Error>([&] { sum(e + w).backward(); }, {"'exp' was already used"});
  EXPECT_EQ(w.grad().to_vector<float>(), before);
  expect_throw_with<ShapeError>([&] { (w * 2.0).backward(ones({3}, device())); },
                                {"[backward] gradient has shape [3]"});
}

// Where maximum/minimum give NaN, both operands get the gradient, as in PyTorch and as the
// NaN of a max() reduction does (it went to neither); a tie splits it, a loser gets none.
TEST_P(Autograd, MaximumAndMinimumSendANansGradientToBothOperands) {
  for (const bool is_max : {true, false}) {
    const Tensor a = tensor({NAN, 1.0, NAN, 2.0, 3.0}, {device(), kFloat64}).requires_grad_();
    const Tensor b = tensor({1.0, NAN, NAN, 2.0, 0.0}, {device(), kFloat64}).requires_grad_();
    (is_max ? maximum(a, b) : minimum(a, b)).backward(ones({5}, {device(), kFloat64}));
    EXPECT_EQ(a.grad().to_vector<double>(),
              (std::vector<double>{1, 1, 1, 0.5, is_max ? 1.0 : 0.0}));
    EXPECT_EQ(b.grad().to_vector<double>(),
              (std::vector<double>{1, 1, 1, 0.5, is_max ? 0.0 : 1.0}));
    const Tensor c = tensor({NAN, 1.0}, {device(), kFloat64}).requires_grad_();
    (is_max ? maximum(c, 0.5) : minimum(c, 0.5)).backward(ones({2}, {device(), kFloat64}));
    EXPECT_EQ(c.grad().to_vector<double>(), (std::vector<double>{1, is_max ? 1.0 : 0.0}));
  }
}

TEST_P(Autograd, PowAndNormHavePyTorchsSlopesAtZero) {
  // d/da a^0 = 0 and d/db 0^b = 0 for b >= 0 (not 0 * inf or 0 * log 0), and ||a|| has
  // slope 0 at a = 0 (a zero-initialized weight under a norm penalty must not get NaN).
  const Tensor x = zeros({3}, {device(), kFloat64}).requires_grad_();
  pow(x, 0.0).sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 0, 0}));
  const Tensor a = tensor({0.0, 0.0, 2.0}, {device(), kFloat64}).requires_grad_();
  const Tensor b = tensor({0.0, 2.0, 0.0}, {device(), kFloat64}).requires_grad_();
  pow(a, b).sum().backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{0, 0, 0}));
  const std::vector<double> db = b.grad().to_vector<double>();
  EXPECT_EQ(db[0], 0);
  EXPECT_EQ(db[1], 0);
  EXPECT_NEAR(db[2], std::log(2.0), 1e-12);  // 2^0 * log 2, unmasked
  // A float32 base under a float64 exponent: the slope in the exponent is float64's
  // (log(3) was taken in float32: 1.9028523361 for 3^0.5 log 3 = 1.9028523018).
  const Tensor e = tensor({0.5, 1.5}, {device(), kFloat64}).requires_grad_();
  pow(tensor({3.0, 7.0}, device()), e).sum().backward();
  const std::vector<double> de = e.grad().to_vector<double>();
  EXPECT_NEAR(de[0], std::sqrt(3.0) * std::log(3.0), 1e-13);
  EXPECT_NEAR(de[1], std::pow(7.0, 1.5) * std::log(7.0), 1e-12);
  const Tensor w = zeros({2, 1}, {device(), kFloat32}).requires_grad_();
  norm(w).backward();
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{0, 0}));
  const Tensor v = tensor({3.0, 4.0}, device()).requires_grad_();
  norm(v).backward();
  testing::expect_close(v.grad(), {0.6, 0.8}, 1e-6, 1e-6, "the slope of ||(3, 4)||");
}

TEST_P(Autograd, GradientsHaveTheirTensorsDtype) {
  // backward(gradient) casts the gradient to the tensor's dtype, as PyTorch does, so a
  // leaf's grad() is always in its own dtype; set_grad refuses another dtype.
  for (const Dtype given : {kInt64, kFloat32, kBFloat16}) {
    const Tensor w = tensor({1.0, 2.0}, {device(), kFloat64}).requires_grad_();
    (w * 2.0).backward(ones({2}, {device(), given}));
    EXPECT_EQ(w.grad().dtype(), kFloat64) << "gradient given in " << dtype_name(given);
    EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{2, 2}));
    const Tensor leaf = tensor({3.0}, {device(), kFloat64}).requires_grad_();
    leaf.backward(ones({1}, {device(), given}));
    EXPECT_EQ(leaf.grad().dtype(), kFloat64)
        << "a leaf's own backward, given " << dtype_name(given);
  }
  Tensor w = ones({2}, {device(), kFloat64}).requires_grad_();
  expect_throw_with<DtypeError>([&] { w.set_grad(ones({2}, device())); },
                                {"[set_grad]", "float32", "float64", ".to(kFloat64)"});
}

// A gradient wider than the output it flows into (a float64 target promoting a float32
// model's loss) is cast to that output's dtype before the node's formula, as in PyTorch:
// conv2d's and the pools' kernels read the float64 gradient as float32 values (w's gradient
// was 5 instead of 32, the pools' all zeros) and matmul's backward refused to mix dtypes.
TEST_P(Autograd, AGradientWiderThanItsNodesOutputIsCastToIt) {
  const Tensor x = ones({1, 1, 3, 3}, device());
  const Tensor w = ones({1, 1, 2, 2}, device()).requires_grad_();
  nn::mse_loss(conv2d(x, w), zeros({1, 1, 2, 2}, {kFloat64, device()}), nn::Reduction::kSum)
      .backward();
  EXPECT_EQ(w.grad().to_vector<double>(), std::vector<double>(4, 32.0));
  Tensor y = tensor({1.f, 2.f, 3.f, 4.f}, device()).reshape({1, 1, 2, 2}).requires_grad_();
  const Tensor target = zeros({1, 1, 1, 1}, {kFloat64, device()});
  nn::mse_loss(max_pool2d(y), target, nn::Reduction::kSum).backward();
  EXPECT_EQ(y.grad().to_vector<double>(), (std::vector<double>{0, 0, 0, 8}));
  y.set_grad(Tensor());
  nn::mse_loss(avg_pool2d(y), target, nn::Reduction::kSum).backward();
  EXPECT_EQ(y.grad().to_vector<double>(), std::vector<double>(4, 1.25));  // 2 * 2.5 / 4
  const Tensor a = tensor({1.f, 2.f, 3.f, 4.f}, device()).reshape({2, 2}).requires_grad_();
  const Tensor b = tensor({1.f, 0.f, 0.f, 1.f}, device()).reshape({2, 2}).requires_grad_();
  (matmul(a, b) * ones({2, 2}, {kFloat64, device()})).sum().backward();
  EXPECT_EQ(a.grad().dtype(), kFloat32);
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{1, 1, 1, 1}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{4, 4, 6, 6}));
}

TEST_P(Autograd, LinearRegressionRecoversItsWeightsWithoutTransfers) {
  manual_seed(3);
  const Tensor true_w = tensor({{2.0}, {-3.4}}, device());
  const Tensor X = randn({256, 2}, device());
  const Tensor y = matmul(X, true_w) + 4.2;
  Tensor w = zeros({2, 1}, device()).requires_grad_();
  Tensor b = zeros({1}, device()).requires_grad_();
  synchronize(device());
  reset_transfer_stats();
  for (int step = 0; step < 200; ++step) {
    const Tensor loss = mean(pow(matmul(X, w) + b - y, 2.0));
    loss.backward();
    NoGradGuard no_grad;
    w.sub_(w.grad() * 0.1);
    b.sub_(b.grad() * 0.1);
    w.set_grad(Tensor());
    b.set_grad(Tensor());
  }
  // Forward, backward and the update stayed on the device: no copy, no host wait.
  EXPECT_EQ(transfer_stats(), TransferStats{}) << transfer_stats();
  const auto wv = w.to_vector<double>();
  EXPECT_NEAR(wv[0], 2.0, 1e-3);
  EXPECT_NEAR(wv[1], -3.4, 1e-3);
  EXPECT_NEAR(b.item<double>(), 4.2, 1e-3);
}

TEST_P(Autograd, GraphMemoryIsReturnedAfterBackward) {
  Tensor w = rand({64, 64}, device()).requires_grad_();
  synchronize(device());
  const std::size_t before = memory_stats(device()).in_use;
  {
    Tensor h = relu(matmul(w, w)) * 2.0;
    sum(h).backward();
  }
  w.set_grad(Tensor());
  synchronize(device());
  EXPECT_EQ(memory_stats(device()).in_use, before);
}

TEST_P(Autograd, ARefusedInPlaceOpWritesNothingSoBackwardStillRuns) {
  // The version was bumped before the op's own checks refused it: every graph that had
  // saved the tensor then refused backward() for a write that never happened.
  Tensor x = tensor({1.0, 2.0}, {kFloat64, device()}).requires_grad_();
  Tensor y = exp(x);
  expect_throw_with<Error>([&] { y.add_(1.0); }, {"[add_] cannot write in place"});
  Tensor w = tensor({1.0, 2.0, 3.0}, {kFloat64, device()});
  Tensor v = ones({3}, {kFloat64, device()}).requires_grad_();
  Tensor z = v * w;
  expect_throw_with<ShapeError>(
      [&] {
        w.add_(ones({2, 3}, {kFloat64, device()}));
      },
      {"does not broadcast"});
  expect_throw_with<ShapeError>(
      [&] {
        w.copy_(ones({2}, {kFloat64, device()}));
      },
      {"[copy_] shapes [3] and [2] cannot be broadcast"});
  sum(y).backward();
  sum(z).backward();
  EXPECT_EQ(v.grad().to_vector<double>(), (std::vector<double>{1, 2, 3}));
}

TEST_P(Autograd, IntegerConversionsAndSelfGradientsHaveNoSlope) {
  // to(kInt64) was recorded: the rounding's slope was taken as 1 (x.grad [2, 4], not [1, 2]).
  Tensor x = tensor({1.4, 2.6}, {kFloat64, device()}).requires_grad_();
  const Tensor i = x.to(kInt64);
  EXPECT_FALSE(i.requires_grad());
  EXPECT_FALSE(x.to(kBool).requires_grad());
  sum(i.to(kFloat64) * x).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 2}));
  // A tensor cannot be its own gradient: clipping it would change the parameter.
  expect_throw_with<Error>([&] { x.set_grad(x); }, {"[set_grad]", "own memory", ".clone()"});
  expect_throw_with<Error>([&] { x.set_grad(x.detach()); }, {"[set_grad]", "own memory"});
}

TEST_P(Autograd, ALongGraphIsFreedWithoutRecursion) {
  // Freed node by node from inside each destructor, 300,000 ops overflowed the stack
  // (Note [Freeing long graphs]); through captured tensors (mul by a scalar saves nothing,
  // mul by a tensor saves it) as well as through edges.
  if (device().kind() != DeviceKind::kCpu || device().index() > 0) GTEST_SKIP() << "one is enough";
  Tensor x = ones({1}, {kFloat64, device()}).requires_grad_();
  const Tensor c = full({1}, 1.0, {kFloat64, device()});
  {
    Tensor y = x;
    for (int i = 0; i < 300000; ++i) y = (i % 2 == 0) ? y + x : y * c;
  }
  Tensor y = x;
  for (int i = 0; i < 300000; ++i) y = y + x;
  sum(y).backward();
  EXPECT_EQ(x.grad().item<double>(), 300001.0);
}

TEST_P(Autograd, TwoThreadsBackwardIntoOneLeafLoseNothing) {
  // Each pass read the grad() the other was replacing: some of the sums were lost.
  Tensor w = ones({4}, {kFloat64, device()}).requires_grad_();
  constexpr int kPasses = 6000;
  const auto passes = [&] {
    for (int i = 0; i < kPasses; ++i) sum(w * ones({4}, {kFloat64, device()})).backward();
  };
  std::thread a(passes), b(passes);
  a.join();
  b.join();
  EXPECT_EQ(w.grad().to_vector<double>(), std::vector<double>(4, 2.0 * kPasses));
}

TEST_P(Autograd, SavedTensorWrittenInPlaceIsRefusedAtBackward) {
  // A Linear layer's input buffer refilled before backward: the weight gradient would be
  // computed from the new values (5x here). backward() must refuse, naming op and tensor.
  nn::Linear layer(3, 2, /*with_bias=*/true, device());
  Tensor x = ones({4, 3}, device());
  Tensor loss = sum(layer.forward(x));
  x.mul_(5.0);  // x does not require grad, so the write itself is allowed
  expect_throw_with<Error>([&] { loss.backward(); },
                           {"[backward] linear saved its input", "float32 [4, 3]",
                            "written in place afterwards", "version 0, now 1", ".clone()"});
  EXPECT_FALSE(layer.weight.grad().defined()) << "a refused pass must change no grad()";

  // Through a view, a copy_ and a fill_ too; and for a plain op (mul saves its operands).
  Tensor w = ones({3}, device()).requires_grad_();
  Tensor c = tensor({1.0, 2.0, 3.0}, device());
  Tensor y = sum(w * c);
  c.view({3, 1}).fill_(0.0);
  expect_throw_with<Error>([&] { y.backward(); }, {"[backward] mul saved its other"});
  Tensor s = tensor({1.0, 2.0, 3.0}, device());
  Tensor z = sum(relu(w * 2.0) * s);
  s.copy_(zeros({3}, device()));
  expect_throw_with<Error>([&] { z.backward(); }, {"saved its other"});

  // A parameter stepped between forward and backward is caught as well.
  Tensor p = ones({2, 2}, device()).requires_grad_();
  Tensor q = sum(matmul(p, p));
  {
    NoGradGuard no_grad;
    p.sub_(1.0);
  }
  expect_throw_with<Error>([&] { q.backward(); }, {"matmul saved its"});

  // Writes to tensors no formula reads are fine: add saves nothing, and after backward
  // the graph is gone.
  Tensor a = tensor({1.0, 2.0}, device());
  Tensor r = sum(w.view({3})[0] + a);
  a.fill_(7.0);
  r.backward();
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{2, 0, 0}));
  Tensor u = tensor({3.0, 4.0, 5.0}, device());
  sum(w * u).backward();
  u.fill_(0.0);  // after backward: nothing to check
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{5, 4, 5}));
}

// d(a/b)/db = -g (a / b) / b, as PyTorch: -g a / (b b) overflowed b * b (float16 past 256:
// a slope of 0) or underflowed it (float32 1e-25: -inf).
TEST_P(Autograd, DivisionsSlopeInTheDivisorDoesNotSquareIt) {
  struct Case {
    Dtype dtype;
    double a, b;
  };
  for (const Case& c :
       {Case{kFloat16, 600, 300}, Case{kFloat32, 1e30, 1e20}, Case{kFloat32, 1e-20, 1e-25}}) {
    Tensor a = full({1}, c.a, {c.dtype, device()}).requires_grad_();
    Tensor b = full({1}, c.b, {c.dtype, device()}).requires_grad_();
    div(a, b).sum().backward();
    const double expected = -c.a / (c.b * c.b);
    EXPECT_NEAR(b.grad().to_vector<double>()[0], expected, std::abs(expected) * 1e-2)
        << dtype_name(c.dtype) << " " << c.a << " / " << c.b;
    Tensor d = full({1}, c.b, {c.dtype, device()}).requires_grad_();
    div(c.a, d).sum().backward();  // a scalar over a tensor
    EXPECT_NEAR(d.grad().to_vector<double>()[0], expected, std::abs(expected) * 1e-2)
        << dtype_name(c.dtype) << " scalar " << c.a << " / " << c.b;
  }
}

// A grad-ready hook runs in the middle of the pass: a write it makes to a tensor a later
// formula reads was not seen (versions were checked only before the pass) and gave c's
// gradient from the new values ([-96, -95, -94] instead of [4, 5, 6]).
TEST_P(Autograd, AWriteInAGradReadyHookToASavedTensorIsRefused) {
  const TensorOptions o{kFloat64, device()};
  Tensor a = tensor({1.0, 2.0, 3.0}, o).requires_grad_();
  Tensor b = tensor({4.0, 5.0, 6.0}, o).requires_grad_();
  Tensor c = tensor({7.0, 8.0, 9.0}, o).requires_grad_();
  set_grad_ready_hook(a, [b](const Tensor&) {
    NoGradGuard no_grad;
    Tensor(b).sub_(100.0);
  });
  Tensor y = sum(c * b) + sum(a);
  expect_throw_with<Error>([&] { y.backward(); },
                           {"[backward] mul saved its", "written in place afterwards"});
  EXPECT_FALSE(c.grad().defined()) << "c's gradient was computed from the hook's values";
}

// Module::to and parameter assignment point the parameter at other memory: a graph recorded
// before gave the gradient of the old tensor (on its old device, or from values written
// since into the new one), silently.
TEST_P(Autograd, ALeafMovedOrReplacedBetweenForwardAndBackwardIsRefused) {
  {  // replaced on its device, then stepped: x's gradient used the new weight, 10x
    nn::Linear lin(2, 1, /*with_bias=*/false, device());
    Tensor x = tensor({{3.0, 4.0}}, device()).requires_grad_();
    Tensor y = sum(mul(x, lin.weight));
    lin.weight = tensor({{1.0, 2.0}}, device());
    {
      NoGradGuard no_grad;
      lin.weight.mul_(10.0);
    }
    expect_throw_with<Error>(
        [&] { y.backward(); },
        {"[backward] mul's input 1 is a tensor that requires grad",
         "moved, converted or replaced afterwards", "Run backward() before moving"});
    EXPECT_FALSE(x.grad().defined());
  }
  {  // a frozen weight (no edge, only saved) converted to float64
    nn::Linear lin(2, 1, /*with_bias=*/false, device());
    lin.weight.requires_grad_(false);
    Tensor x = tensor({{3.0, 4.0}}, device()).requires_grad_();
    Tensor y = sum(mul(x, lin.weight));
    lin.to(kFloat64);
    expect_throw_with<Error>([&] { y.backward(); },
                             {"[backward] mul saved its other (float32 [1, 2]",
                              "converted or replaced afterwards (now float64 [1, 2]"});
  }
  {  // re-pointed at its own memory in another layout (the storage is the same)
    nn::Linear lin(2, 2, /*with_bias=*/false, device());
    Tensor x = tensor({{1.0, 0.0}, {0.0, 0.0}}, device()).requires_grad_();
    Tensor y = sum(mul(x, lin.weight));
    lin.weight = lin.weight.detach().t();
    expect_throw_with<Error>([&] { y.backward(); }, {"[backward] mul's input 1"});
  }
  if (num_cpu_devices() < 2 || device().kind() != DeviceKind::kCpu) return;
  // To another logical device: the weight's gradient landed on the old one.
  const Device other = device() == cpu(1) ? cpu(0) : cpu(1);
  nn::Linear lin(3, 2, /*with_bias=*/true, device());
  Tensor loss = sum(lin(ones({1, 3}, device())));
  lin.to(other);
  expect_throw_with<DeviceMismatchError>(
      [&] { loss.backward(); },
      {"[backward] linear's input", fmt::format("on {} when linear ran", device().str()),
       fmt::format("on {})", other.str())});
  EXPECT_FALSE(lin.weight.grad().defined());
}

TEST_P(Autograd, SetGradNamesTheMismatch) {
  Tensor x = zeros({3}, device()).requires_grad_();
  expect_throw_with<ShapeError>([&] { x.set_grad(ones({2}, device())); },
                                {"[set_grad] the gradient has shape [2] but the tensor has "
                                 "shape [3]"});
  if (num_cpu_devices() < 2 || device().kind() != DeviceKind::kCpu) return;
  const Device other = device() == cpu(1) ? cpu(0) : cpu(1);
  expect_throw_with<DeviceMismatchError>(
      [&] { x.set_grad(ones({3}, other)); },
      {fmt::format("[set_grad] the gradient is on {} but the tensor is on {}", other.str(),
                   device().str()),
       ".to("});
}

// Which operand makes an in-place op unrecordable, and a fix that keeps its gradient.
TEST_P(Autograd, InPlaceRefusalsNameTheOperand) {
  Tensor x = ones({2}, device()).requires_grad_();
  Tensor y = ones({2}, device());
  expect_throw_with<Error>([&] { y.add_(x); },
                           {"[add_] cannot write in place with an operand that requires grad "
                            "(other)",
                            "its gradient would miss this use", "out-of-place"});
  expect_throw_with<Error>([&] { x.add_(y); },
                           {"[add_] cannot write in place into a tensor that requires grad (a "
                            "leaf)",
                            "NoGradGuard"});
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Autograd);

}  // namespace
}  // namespace tessera
