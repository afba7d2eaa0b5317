// Learning-rate schedules (optim/lr_schedule.h): each one's lr for epochs 0..11 against
// PyTorch's schedulers, their descriptions, and their argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "support/device_test.h"
#include "tessera/optim/lr_schedule.h"

namespace tessera {
namespace {

using optim::LrSchedule;
using testing::expect_throw_with;

// The lr during epochs 0..11 with base lr 0.1, as PyTorch 2.15.0 (CPU) gives it: torch.optim.SGD
// with lr=0.1, the scheduler below, and for each epoch the param group's lr read, then
// opt.step(), sched.step() (/work/main/.bench-venv/bin/python; torch.optim.lr_scheduler).
// PyTorch chains most of these (each step multiplies the last lr), tessera takes the closed
// form (Note [Schedules as functions of the epoch]): they agree to a relative 1e-12.
void expect_pytorch(const LrSchedule& s, const std::vector<double>& pytorch) {
  for (std::size_t e = 0; e < pytorch.size(); ++e) {
    EXPECT_NEAR(s.lr(0.1, static_cast<int>(e)), pytorch[e], 1e-12 * pytorch[e])
        << s.str() << " at epoch " << e;
  }
}

TEST(LrSchedule, StepLRMatchesPyTorch) {  // S.StepLR(opt, 3, 0.5)
  expect_pytorch(optim::StepLR(3, 0.5),
                 {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.0125, 0.0125, 0.0125});
}

TEST(LrSchedule, MultiStepLRMatchesPyTorch) {  // S.MultiStepLR(opt, [2, 5, 9], 0.1)
  expect_pytorch(
      optim::MultiStepLR({2, 5, 9}, 0.1),
      {0.1, 0.1, 0.010000000000000002, 0.010000000000000002, 0.010000000000000002,
       0.0010000000000000002, 0.0010000000000000002, 0.0010000000000000002, 0.0010000000000000002,
       0.00010000000000000003, 0.00010000000000000003, 0.00010000000000000003});
}

TEST(LrSchedule, ExponentialLRMatchesPyTorch) {  // S.ExponentialLR(opt, 0.9)
  expect_pytorch(
      optim::ExponentialLR(0.9),
      {0.1, 0.09000000000000001, 0.08100000000000002, 0.07290000000000002, 0.06561000000000002,
       0.05904900000000002, 0.05314410000000002, 0.04782969000000002, 0.043046721000000024,
       0.03874204890000002, 0.03486784401000002, 0.03138105960900001});
}

TEST(LrSchedule, CosineAnnealingLRMatchesPyTorch) {  // S.CosineAnnealingLR(opt, 5, 0.01)
  // Down to eta_min at t_max = 5, and back up after it.
  expect_pytorch(
      optim::CosineAnnealingLR(5, 0.01),
      {0.1, 0.09140576474687263, 0.06890576474687263, 0.04109423525312736, 0.018594235253127367,
       0.01, 0.018594235253127367, 0.04109423525312739, 0.06890576474687267, 0.09140576474687269,
       0.10000000000000006, 0.09140576474687272});
}

TEST(LrSchedule, LinearLRMatchesPyTorch) {  // S.LinearLR(opt, 0.25, 1.0, 4)
  expect_pytorch(
      optim::LinearLR(0.25, 1.0, 4),
      {0.025, 0.043750000000000004, 0.06250000000000001, 0.08125000000000002, 0.10000000000000002,
       0.10000000000000002, 0.10000000000000002, 0.10000000000000002, 0.10000000000000002,
       0.10000000000000002, 0.10000000000000002, 0.10000000000000002});
}

TEST(LrSchedule, SequentialLRMatchesPyTorch) {
  // S.SequentialLR(opt, [S.LinearLR(opt, 0.25, 1.0, 3), S.CosineAnnealingLR(opt, 6, 0.001)], [3])
  const optim::SequentialLR warm_cosine({std::make_shared<optim::LinearLR>(0.25, 1.0, 3),
                                         std::make_shared<optim::CosineAnnealingLR>(6, 0.001)},
                                        {3});
  expect_pytorch(warm_cosine,
                 {0.025, 0.05, 0.07500000000000001, 0.1, 0.09336825748732973, 0.07525000000000001,
                  0.0505, 0.025750000000000012, 0.007631742512670284, 0.001, 0.007631742512670284,
                  0.025750000000000002});
  // S.SequentialLR(opt, [S.LinearLR(opt, 0.2, 1.0, 4), S.StepLR(opt, 2, 0.5)], [4]): what
  // with_linear_warmup(4, StepLR(2, 0.5)) makes.
  const std::vector<double> warm_step{0.020000000000000004,
                                      0.04000000000000001,
                                      0.06000000000000001,
                                      0.08000000000000002,
                                      0.1,
                                      0.1,
                                      0.05,
                                      0.05,
                                      0.025,
                                      0.025,
                                      0.0125,
                                      0.0125};
  expect_pytorch(*optim::with_linear_warmup(4, std::make_shared<optim::StepLR>(2, 0.5)), warm_step);
}

TEST(LrSchedule, AWarmUpAloneHoldsTheBaseLrAfterIt) {
  const auto warmup = optim::with_linear_warmup(3);
  const std::vector<double> expected{0.25, 0.5, 0.75, 1, 1, 1};
  for (int e = 0; e < 6; ++e) EXPECT_NEAR(warmup->lr(1.0, e), expected[e], 1e-15) << e;
}

// The longest warm-up an int can count: its first factor, 1 / (warmup + 1), once overflowed
// the int and was refused as a negative start_factor the user never passed.
TEST(LrSchedule, AWarmUpOfIntMaxEpochsStartsNearZero) {
  const int longest = std::numeric_limits<int>::max();
  const auto warmup = optim::with_linear_warmup(longest);
  EXPECT_NEAR(warmup->lr(1.0, 0), 1.0 / (longest + 1.0), 1e-24);
  EXPECT_EQ(warmup->lr(1.0, longest), 1.0);
}

// An lr that grows past the largest double is refused where it is made, naming the
// schedule and the epoch, not by the optimizer's set_lr in the middle of a fit.
TEST(LrSchedule, AnLrPastTheLargestDoubleIsRefusedNamingTheSchedule) {
  const optim::ExponentialLR grows(2);
  EXPECT_EQ(grows.lr(0.1, 1000), 0.1 * std::pow(2.0, 1000));
  expect_throw_with<Error>([&] { (void)grows.lr(0.1, 1100); },
                           {"[ExponentialLR(gamma=2)] the lr of epoch 1100", "is inf",
                            "grows past the largest double", "a factor <= 1"});
  expect_throw_with<Error>([] { (void)optim::StepLR(1, 1e308).lr(1, 2); },
                           {"[StepLR(step_size=1, gamma=1e+308)] the lr of epoch 2"});
}

TEST(LrSchedule, DescribesItselfAsItsConstructorTakesIt) {
  EXPECT_EQ(optim::StepLR(30).str(), "StepLR(step_size=30, gamma=0.1)");
  EXPECT_EQ(optim::MultiStepLR({2, 5}, 0.5).str(), "MultiStepLR(milestones=[2, 5], gamma=0.5)");
  EXPECT_EQ(optim::ExponentialLR(0.95).str(), "ExponentialLR(gamma=0.95)");
  EXPECT_EQ(optim::CosineAnnealingLR(10).str(), "CosineAnnealingLR(t_max=10, eta_min=0)");
  EXPECT_EQ(optim::with_linear_warmup(2, std::make_shared<optim::ExponentialLR>(0.5))->str(),
            "SequentialLR(schedules=[LinearLR(start_factor=0.3333333333333333, end_factor=1, "
            "total_iters=2), ExponentialLR(gamma=0.5)], milestones=[2])");
  // Numbers read back exactly: two schedules that differ in the last bit differ here.
  EXPECT_NE(optim::ExponentialLR(0.1).str(), optim::ExponentialLR(std::nextafter(0.1, 1)).str());
}

TEST(LrSchedule, RefusesArgumentsThatMakeNoSchedule) {
  expect_throw_with<Error>([] { optim::StepLR(0); },
                           {"[StepLR] step_size is 0", "a count of epochs >= 1"});
  expect_throw_with<Error>([] { optim::StepLR(3, 0); },
                           {"[StepLR] gamma is 0; it must be a finite factor > 0"});
  expect_throw_with<Error>([] { optim::StepLR(3, -0.5); }, {"[StepLR] gamma is -0.5"});
  expect_throw_with<Error>([] { optim::ExponentialLR(NAN); },
                           {"[ExponentialLR] gamma is nan; it must be a finite factor > 0"});
  expect_throw_with<Error>(
      [] {
        optim::MultiStepLR({5, 2});
      },
      {"[MultiStepLR] milestones are [5, 2]", "increasing epochs >= 1", "Sort them"});
  expect_throw_with<Error>([] { optim::MultiStepLR({2, 2}); }, {"milestones are [2, 2]"});
  expect_throw_with<Error>([] { optim::MultiStepLR({0, 3}); }, {"milestones are [0, 3]"});
  expect_throw_with<Error>([] { optim::MultiStepLR({3}, 0); }, {"[MultiStepLR] gamma is 0"});
  expect_throw_with<Error>([] { optim::CosineAnnealingLR(0); },
                           {"[CosineAnnealingLR] t_max is 0", "(usually the run's epochs)"});
  expect_throw_with<Error>([] { optim::CosineAnnealingLR(5, -0.1); },
                           {"[CosineAnnealingLR] eta_min is -0.1; it must be a finite lr >= 0"});
  expect_throw_with<Error>([] { optim::LinearLR(0, 1, 5); },
                           {"[LinearLR] start_factor is 0; it must be in (0, 1]"});
  expect_throw_with<Error>([] { optim::LinearLR(0.5, 1.5, 5); },
                           {"[LinearLR] end_factor is 1.5; it must be in [0, 1]"});
  expect_throw_with<Error>([] { optim::LinearLR(0.5, 1, 0); }, {"[LinearLR] total_iters is 0"});
  const auto step = std::make_shared<optim::StepLR>(2);
  expect_throw_with<Error>([] { optim::SequentialLR({}, {}); },
                           {"[SequentialLR] got no schedules"});
  expect_throw_with<Error>(
      [&] {
        optim::SequentialLR({step, nullptr}, {2});
      },
      {"[SequentialLR] schedule 1 is null"});
  expect_throw_with<Error>(
      [&] {
        optim::SequentialLR({step, step}, {});
      },
      {"[SequentialLR] got 2 schedules and 0 milestones", "one milestone less"});
  expect_throw_with<Error>(
      [&] {
        optim::SequentialLR({step, step, step}, {4, 3});
      },
      {"[SequentialLR] milestones are [4, 3]"});
  expect_throw_with<Error>([] { optim::with_linear_warmup(0); },
                           {"[with_linear_warmup] warmup_epochs is 0; it must be >= 1"});
  expect_throw_with<Error>([&] { (void)step->lr(0.1, -1); },
                           {"[LrSchedule::lr] epoch is -1; epochs count from 0"});
  expect_throw_with<Error>([&] { (void)step->lr(-0.1, 0); },
                           {"[LrSchedule::lr] base_lr is -0.1; it must be a finite lr >= 0"});
}

}  // namespace
}  // namespace tessera
