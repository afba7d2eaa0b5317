// GradScaler: unscaling against a float64 reference, steps skipped on the device after an
// injected inf or NaN (SGD and Adam continue exactly as if the step had never happened),
// the scale's growth and backoff, a whole scaled loop under SyncGuard(kError), and every
// misuse's message.
#include <cmath>
#include <limits>

#include "support/device_test.h"
#include "support/reference_optimizers.h"
#include "tessera/optim/adam.h"
#include "tessera/optim/clip.h"
#include "tessera/optim/grad_scaler.h"
#include "tessera/optim/sgd.h"
#include "tessera/sync_guard.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_close;
using testing::expect_throw_with;
using testing::random_values;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

class Scaler : public DeviceTest {
 protected:
  // A float32 leaf parameter of n random values.
  Tensor param(std::size_t n, std::uint64_t seed) const {
    return testing::make_input(random_values(n, seed), {static_cast<std::int64_t>(n)}, kFloat32,
                               device())
        .requires_grad_();
  }
  // Gives p the grad `g` as backward() of a loss scaled by `scale` would: g * scale.
  void set_scaled_grad(Tensor& p, std::vector<double> g, double scale) const {
    for (double& v : g) v *= scale;
    p.set_grad(from_vector(g, p.shape(), {kFloat32, device()}));
  }
  // Any scaled loss on the test device, so that the scaler's state lives there.
  static void start(optim::GradScaler& scaler, Device d) { (void)scaler.scale(zeros({}, d)); }
};

TEST_P(Scaler, UnscalesEveryGradAgainstAFloat64Reference) {
  for (Dtype dtype : {kFloat32, kFloat64}) {
    optim::GradScaler scaler({.init_scale = 1024});
    const std::vector<double> g0 = random_values(37, 5, -3, 3);
    const std::vector<double> g1 = random_values(4, 6, -3, 3);
    Tensor a = testing::make_input(random_values(37, 1), {37}, dtype, device()).requires_grad_();
    Tensor b = testing::make_input(random_values(4, 2), {2, 2}, dtype, device()).requires_grad_();
    Tensor c = zeros({3}, {dtype, device()}).requires_grad_();  // no grad: untouched
    std::vector<double> s0 = g0, s1 = g1;
    for (double& v : s0) v *= 1024;
    for (double& v : s1) v *= 1024;
    a.set_grad(testing::make_input(s0, {37}, dtype, device()));
    // A transposed grad is unscaled in place too, through a contiguous copy.
    b.set_grad(testing::make_input(s1, {2, 2}, dtype, device()).t());
    optim::SGD sgd({a, b, c}, {.lr = 0.1});
    const Tensor loss = scaler.scale(full({}, 2.0, {dtype, device()}));
    EXPECT_EQ(loss.item<double>(), 2048.0);
    scaler.unscale_(sgd);
    const double tol = dtype == kFloat64 ? 1e-12 : 1e-6;
    expect_close(a.grad(), g0, tol, tol, "a " + std::string(dtype_name(dtype)));
    const std::vector<double> g1_t{g1[0], g1[2], g1[1], g1[3]};
    expect_close(b.grad(), g1_t, tol, tol, "b (transposed) " + std::string(dtype_name(dtype)));
    EXPECT_FALSE(c.grad().defined());
    EXPECT_EQ(scaler.found_inf(sgd).item<float>(), 0.0f);
    EXPECT_EQ(scaler.found_inf(sgd).device(), device());
  }
}

TEST_P(Scaler, InfOrNanAnywhereIsFound) {
  for (const double bad : {kInf, -kInf, kNaN}) {
    for (const std::size_t where : {std::size_t{0}, std::size_t{40000}, std::size_t{99999}}) {
      optim::GradScaler scaler;
      start(scaler, device());
      Tensor p = zeros({100000}, device()).requires_grad_();
      std::vector<double> g(100000, 1.0);  // large: the parallel path
      g[where] = bad;
      p.set_grad(from_vector(g, {100000}, {device(), kFloat32}));
      optim::SGD sgd({p}, {.lr = 1});
      scaler.unscale_(sgd);
      EXPECT_EQ(scaler.found_inf(sgd).item<float>(), 1.0f) << bad << " at " << where;
    }
  }
}

// The step with an inf is skipped on the device: the parameters, the momentum buffers and
// the "first step" all stay as they were, so the run equals a reference that never saw it.
TEST_P(Scaler, SkipsSgdStepsWithInfAsIfTheyNeverHappened) {
  const optim::SgdOptions o{.lr = 0.05, .momentum = 0.9, .dampening = 0.3};
  Tensor p = param(6, 1);
  std::vector<double> w = p.to_vector<double>();
  testing::RefSgd ref{o, {}};
  optim::SGD sgd({p}, o);
  optim::GradScaler scaler({.init_scale = 256, .growth_interval = 100});
  start(scaler, device());
  double scale = 256;
  for (int step = 0; step < 5; ++step) {
    std::vector<double> g = random_values(6, 20 + step, -2, 2);
    const bool overflow = step == 0 || step == 2;  // the very first step too
    if (overflow) g[3] = step == 0 ? kInf : kNaN;
    set_scaled_grad(p, g, scale);
    scaler.step(sgd);
    scaler.update();
    if (overflow) {
      scale *= 0.5;
    } else {
      ref.step(w, g);
    }
    expect_close(p, w, 2e-5, 2e-5, "step " + std::to_string(step));
    EXPECT_EQ(scaler.get_scale(), scale) << "step " << step;
  }
}

TEST_P(Scaler, SkipsAdamStepsWithInfAndTheirCounts) {
  for (bool decoupled : {false, true}) {
    const optim::AdamOptions o{.lr = 0.02, .weight_decay = 0.1};
    Tensor p = param(5, 2);
    std::vector<double> w = p.to_vector<double>();
    testing::RefAdam ref{o, decoupled};
    std::unique_ptr<optim::Adam> adam =
        decoupled
            ? std::make_unique<optim::AdamW>(std::vector<Tensor>{p},
                                             optim::AdamWOptions{.lr = 0.02, .weight_decay = 0.1})
            : std::make_unique<optim::Adam>(std::vector<Tensor>{p}, o);
    optim::GradScaler scaler({.init_scale = 64});
    start(scaler, device());
    int clean = 0;
    for (int step = 0; step < 5; ++step) {
      std::vector<double> g = random_values(5, 40 + step, -1, 1);
      const bool overflow = step == 1 || step == 2;
      if (overflow) g[0] = -kInf;
      set_scaled_grad(p, g, scaler.get_scale());
      scaler.step(*adam);
      scaler.update();
      if (!overflow) {
        ref.step(w, g);
        ++clean;
      }
      const std::string what =
          std::string(decoupled ? "AdamW" : "Adam") + " step " + std::to_string(step);
      expect_close(p, w, 2e-5, 2e-5, what);
      EXPECT_EQ(adam->step_count(0), clean) << what;
    }
    EXPECT_TRUE(adam->capturable());  // its counts moved to the device
  }
}

TEST_P(Scaler, GrowsAfterCleanStepsAndBacksOffAfterAnInf) {
  optim::GradScaler scaler(
      {.init_scale = 8, .growth_factor = 4, .backoff_factor = 0.25, .growth_interval = 3});
  Tensor p = param(3, 3);
  optim::SGD sgd({p}, {.lr = 0});
  start(scaler, device());
  const std::vector<bool> overflow{false, false, false, false, true, false, false, false};
  const std::vector<double> expected{8, 8, 32, 32, 8, 8, 8, 32};
  for (std::size_t i = 0; i < overflow.size(); ++i) {
    p.set_grad(full({3}, overflow[i] ? kInf : 1.0, device()));
    scaler.step(sgd);
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), expected[i]) << "after step " << i;
  }
}

// Scale, backward, unscale, clip, step and update: no implicit host wait in any of them,

// The factors multiply in float64 and round once, as torch's _amp_update_scale_ does (in
// float32 the factor 1.1 was rounded first and each update drifted by an ulp).
TEST_P(Scaler, GrowthAndBackoffRoundOnce) {
  optim::GradScaler scaler(
      {.init_scale = 3.7, .growth_factor = 1.1, .backoff_factor = 0.3, .growth_interval = 1});
  Tensor p = param(2, 3);
  optim::SGD sgd({p}, {.lr = 0});
  start(scaler, device());
  float expected = 3.7f;
  for (int i = 0; i < 12; ++i) {
    const bool overflow = i % 5 == 4;
    p.set_grad(full({2}, overflow ? kInf : 1.0, device()));
    scaler.step(sgd);
    scaler.update();
    expected = static_cast<float>(static_cast<double>(expected) * (overflow ? 0.3 : 1.1));
    EXPECT_EQ(scaler.get_scale(), static_cast<double>(expected)) << "after step " << i;
  }
}

// A grad on another device is found before any grad is unscaled: the first try unscaled
// the grads before it, and a second try divided them again.
TEST_P(Scaler, AGradOnAnotherDeviceUnscalesNothing) {
  TESSERA_REQUIRE_TWO_DEVICES();
  Device other = device();
  for (const Device d : available_devices()) {
    if (d != device()) other = d;
  }
  optim::GradScaler scaler({.init_scale = 4});
  Tensor a = param(2, 1);
  Tensor b = ones({2}, other).requires_grad_();
  optim::SGD sgd({a, b}, {.lr = 0.1});
  start(scaler, device());
  a.set_grad(full({2}, 4.0, device()));
  b.set_grad(ones({2}, other));
  expect_throw_with<DeviceMismatchError>([&] { scaler.unscale_(sgd); },
                                         {"[GradScaler.unscale_] parameter 1's grad is on"});
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{4, 4}));
  b.set_grad(Tensor());
  scaler.unscale_(sgd);
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{1, 1}));
}

// As PyTorch: a growth past float32's range keeps the scale. An infinite scale would make
// every scaled loss inf and skip every later step, and backing off (inf * 0.5) never ends.
TEST_P(Scaler, NeverGrowsTheScaleToInfinity) {
  const double big = static_cast<double>(std::numeric_limits<float>::max()) / 3;
  const double big_f32 = static_cast<double>(static_cast<float>(big));
  optim::GradScaler scaler({.init_scale = big, .growth_factor = 2, .growth_interval = 1});
  Tensor p = param(3, 4);
  optim::SGD sgd({p}, {.lr = 0});
  start(scaler, device());
  const std::vector<bool> overflow{false, false, false, true, false};
  const std::vector<double> expected{2 * big_f32, 2 * big_f32, 2 * big_f32, big_f32, 2 * big_f32};
  for (std::size_t i = 0; i < overflow.size(); ++i) {
    p.set_grad(full({3}, overflow[i] ? kInf : 1.0, device()));
    scaler.step(sgd);
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), expected[i]) << "after step " << i;
  }
}
// and the injected overflow is still skipped.
TEST_P(Scaler, AScaledLoopMakesNoHostWait) {
  Tensor w = param(8, 4);
  const Tensor x = testing::make_input(random_values(8, 5), {8}, kFloat32, device());
  Tensor x_bad = x.clone();
  x_bad.narrow(0, 2, 1).fill_(kInf);
  optim::Adam adam({w}, {.lr = 0.01});
  optim::GradScaler scaler({.init_scale = 1024});
  std::vector<double> before_bad_step;
  {
    SyncGuard strict(SyncMode::kError);
    for (int step = 0; step < 4; ++step) {
      adam.zero_grad();
      const Tensor loss = sum(mul(mul(w, w), step == 2 ? x_bad : x));
      scaler.scale(loss).backward();
      scaler.unscale_(adam);
      optim::clip_grad_norm_({w}, 1.0);
      scaler.step(adam);
      scaler.update();
    }
  }
  EXPECT_EQ(adam.step_count(0), 3);  // the overflowed step did not count
  EXPECT_EQ(scaler.get_scale(), 512.0);
  for (double v : w.to_vector<double>()) EXPECT_TRUE(std::isfinite(v));
}

TEST_P(Scaler, DisabledPassesThrough) {
  optim::GradScaler scaler({.enabled = false});
  Tensor p = param(2, 6);
  const std::vector<double> w = p.to_vector<double>();
  const Tensor loss = full({}, 3.0, device());
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  p.set_grad(ones({2}, device()));
  optim::SGD sgd({p}, {.lr = 0.5});
  scaler.unscale_(sgd);
  scaler.step(sgd);
  scaler.update();
  expect_close(p, {w[0] - 0.5, w[1] - 0.5}, 1e-6, 1e-6);
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_FALSE(scaler.is_enabled());
}

TEST_P(Scaler, MisuseIsRefusedWithTheFix) {
  Tensor p = param(2, 7);
  optim::SGD sgd({p}, {.lr = 0.1});
  optim::GradScaler scaler;
  expect_throw_with<Error>(
      [&] { scaler.unscale_(sgd); },
      {"[GradScaler.unscale_] no loss was scaled yet", "scaler.scale(loss).backward()"});
  expect_throw_with<Error>([&] { scaler.update(); }, {"[GradScaler.update] no loss was scaled"});
  expect_throw_with<DtypeError>(
      [&] {
        (void)scaler.scale(zeros({}, {kInt64, device()}));
      },
      {"[GradScaler.scale] the loss is int64", "float32 or float64",
       "scaler.scale(loss.to(kFloat32))"});
  start(scaler, device());
  expect_throw_with<Error>(
      [&] { scaler.update(); },
      {"[GradScaler.update] no optimizer's gradients were unscaled", "scaler.step(optimizer)"});
  p.set_grad(ones({2}, device()));
  scaler.unscale_(sgd);
  expect_throw_with<Error>([&] { scaler.unscale_(sgd); },
                           {"[GradScaler.unscale_]", "already unscaled in this step"});
  scaler.step(sgd);
  expect_throw_with<Error>(
      [&] { scaler.step(sgd); },
      {"[GradScaler.step] this optimizer already stepped", "scaler.update() after each step"});
  expect_throw_with<Error>([&] { scaler.unscale_(sgd); },
                           {"[GradScaler.unscale_] this optimizer already stepped in this step",
                            "call unscale_ before step()"});
  scaler.update();
  scaler.step(sgd);  // a fresh step after update() is fine
  scaler.update();
  // No gradient: nothing checked for inf, so update() would grow the scale for nothing.
  sgd.zero_grad();
  expect_throw_with<Error>([&] { scaler.step(sgd); },
                           {"[GradScaler.step] none of this optimizer's 1 parameter(s) has a "
                            "gradient",
                            "update() would count a clean step"});

  expect_throw_with<Error>([] { (void)optim::GradScaler({.init_scale = 0}); },
                           {"[GradScaler] invalid init_scale=0", "> 0"});
  expect_throw_with<Error>([] { (void)optim::GradScaler({.growth_factor = 1}); },
                           {"[GradScaler] invalid growth_factor=1"});
  expect_throw_with<Error>([] { (void)optim::GradScaler({.backoff_factor = 1}); },
                           {"[GradScaler] invalid backoff_factor=1", "(0, 1)"});
  expect_throw_with<Error>([] { (void)optim::GradScaler({.growth_interval = 0}); },
                           {"[GradScaler] invalid growth_interval=0", "[1, 16777216]"});
}

// An optimizer that cannot skip on the device is refused, not stepped with a host check.
TEST_P(Scaler, RefusesAnOptimizerThatCannotSkipOnTheDevice) {
  struct HostStep : optim::Optimizer {
    explicit HostStep(std::vector<Tensor> p) : Optimizer(std::move(p), "HostStep") {}
    void step() override {}
    double lr() const override { return 0; }
    void set_lr(double) override {}
  };
  Tensor p = param(2, 8);
  p.set_grad(ones({2}, device()));
  HostStep opt({p});
  optim::GradScaler scaler;
  start(scaler, device());
  expect_throw_with<Error>([&] { scaler.step(opt); },
                           {"[HostStep.step_unless] this optimizer cannot skip a step on the "
                            "device",
                            "use SGD, Adam or AdamW"});
  // Nor can it save or load a state: refused, never saved empty.
  expect_throw_with<Error>([&] { (void)opt.state_dict(); },
                           {"[HostStep.state_dict] this optimizer cannot save its state"});
  expect_throw_with<Error>([&] { opt.load_state_dict({}); },
                           {"[HostStep.load_state_dict] this optimizer cannot load a state"});
}

// step_unless checks the flag it is handed: the kernels read it as one float32 there.
TEST_P(Scaler, StepUnlessChecksItsFlag) {
  Tensor p = param(2, 9);
  p.set_grad(ones({2}, device()));
  optim::SGD sgd({p}, {.lr = 0.1});
  optim::Adam adam({p}, {.lr = 0.1});
  expect_throw_with<DtypeError>(
      [&] {
        sgd.step_unless(zeros({}, {kFloat64, device()}));
      },
      {"[SGD.step_unless] found_inf is float64", "must be float32"});
  expect_throw_with<ShapeError>([&] { adam.step_unless(zeros({1}, device())); },
                                {"[Adam.step_unless] found_inf has shape [1]", "0-dim"});
  const std::vector<Device> devices = same_kind_devices();
  if (devices.size() < 2) return;
  const Tensor elsewhere = zeros({}, devices[1]);
  expect_throw_with<DeviceMismatchError>(
      [&] { adam.step_unless(elsewhere); },
      {"[Adam.step_unless] parameter 0 is on " + device().str(),
       "found_inf is on " + devices[1].str(), "one GradScaler per device"});
}

// Any nonzero flag skips the step and leaves the step count alone: 1 - found_inf once counted
// a flag of 0.5 as half a step (bias corrections for t = 1.5 next) and one of 2 as -1 (the
// next step corrected for t = 0 and wrote NaN). GradScaler writes only 0 or 1.
TEST_P(Scaler, AnyNonzeroFlagSkipsAnAdamStepWithoutCountingIt) {
  for (const double flag : {0.5, 2.0, -1.0}) {
    Tensor p = full({1}, 1.0, device()).requires_grad_();
    optim::Adam adam({p}, {.lr = 0.1});
    p.set_grad(ones({1}, device()));
    adam.step_unless(full({}, flag, device()));
    EXPECT_EQ(p.item<float>(), 1.0f) << flag;
    EXPECT_EQ(adam.step_count(0), 0) << flag;
    adam.step_unless(zeros({}, device()));  // the first real step: moves by lr exactly
    EXPECT_NEAR(p.item<double>(), 0.9, 1e-6) << flag;
    EXPECT_EQ(adam.step_count(0), 1) << flag;
    optim::Adam reloaded({p}, {.lr = 0.1});
    reloaded.load_state_dict(adam.state_dict());  // a whole count, which loads
    EXPECT_EQ(reloaded.step_count(0), 1) << flag;
  }
}

TEST_P(Scaler, StateStaysOnItsDevice) {
  const std::vector<Device> devices = same_kind_devices();
  if (devices.size() < 2)
    GTEST_SKIP() << "needs a second device of " << device().str() << "'s kind";
  optim::GradScaler scaler;
  start(scaler, devices[0]);
  EXPECT_EQ(scaler.scale_tensor().device(), devices[0]);
  expect_throw_with<DeviceMismatchError>(
      [&] { (void)scaler.scale(zeros({}, devices[1])); },
      {"[GradScaler.scale] the loss is on " + devices[1].str(),
       "this scaler's state is on " + devices[0].str(), "one GradScaler per device"});
  Tensor other = zeros({2}, devices[1]).requires_grad_();
  other.set_grad(ones({2}, devices[1]));
  optim::SGD sgd({other}, {.lr = 0.1});
  expect_throw_with<DeviceMismatchError>(
      [&] { scaler.unscale_(sgd); },
      {"[GradScaler.unscale_] parameter 0's grad is on " + devices[1].str(),
       "one GradScaler per device"});
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Scaler);

}  // namespace
}  // namespace tessera
