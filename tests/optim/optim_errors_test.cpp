// Each optimizer error's wording once, and its type.
#include <limits>
#include <memory>

#include "autograd/autograd_meta.h"
#include "support/device_test.h"
#include "tessera/memory.h"
#include "tessera/nn/linear.h"
#include "tessera/optim/adam.h"
#include "tessera/optim/clip.h"
#include "tessera/optim/sgd.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_throw_with;

class OptimErrors : public DeviceTest {
 protected:
  Tensor param() const { return ones({2}, device()).requires_grad_(); }
};

TEST_P(OptimErrors, NegativeLearningRate) {
  expect_throw_with<Error>([&] { optim::SGD({param()}, {.lr = -0.1}); },
                           {"[SGD] invalid lr=-0.1", ">= 0"});
  optim::Adam adam({param()});
  expect_throw_with<Error>([&] { adam.set_lr(-1); }, {"[Adam] invalid lr=-1"});
}

TEST_P(OptimErrors, BetaOutsideUnitInterval) {
  expect_throw_with<Error>([&] { optim::Adam({param()}, {.beta1 = 1.0}); },
                           {"[Adam] invalid beta1=1", "[0, 1)"});
  expect_throw_with<Error>([&] { optim::AdamW({param()}, {.beta2 = -0.5}); },
                           {"[AdamW] invalid beta2=-0.5", "[0, 1)"});
}

TEST_P(OptimErrors, NesterovNeedsMomentum) {
  expect_throw_with<Error>(
      [&] { optim::SGD({param()}, {.lr = 0.1, .nesterov = true}); },
      {"[SGD] nesterov=true needs momentum > 0 and dampening = 0", "momentum=0"});
}

TEST_P(OptimErrors, NonLeafParameter) {
  const Tensor y = param() * 2.0;
  expect_throw_with<Error>(
      [&] {
        optim::SGD({param(), y});
      },
      {"[SGD] parameter 1 is not a leaf", "detach().requires_grad_()"});
}

TEST_P(OptimErrors, NonFloatingParameter) {
  expect_throw_with<DtypeError>(
      [&] {
        optim::Adam({tensor({1, 2}, device())});
      },
      {"[Adam] parameter 0 is int64", "float32, float64, bfloat16, float16"});
}

TEST_P(OptimErrors, EmptyOrRepeatedParameters) {
  expect_throw_with<Error>([&] { optim::SGD(std::vector<Tensor>{}); },
                           {"[SGD] got an empty parameter list", "module.parameters()",
                            "lazy (LazyLinear) has none until its first forward"});
  const Tensor p = param();
  expect_throw_with<Error>(
      [&] {
        optim::SGD({p, p});
      },
      {"[SGD] parameter 1 is the same tensor as parameter 0"});
}

TEST_P(OptimErrors, GradOnAnotherDevice) {
  TESSERA_REQUIRE_TWO_DEVICES();
  const Device other =
      available_devices()[0] == device() ? available_devices()[1] : available_devices()[0];
  Tensor p = param();
  // set_grad refuses this; force it to prove step() checks anyway.
  detail::impl_of(p).autograd->grad = ones({2}, other);
  optim::SGD opt({p}, {.lr = 0.1});
  expect_throw_with<DeviceMismatchError>(
      [&] { opt.step(); },
      {"[SGD.step] operands are on different devices: parameter 0 on " + device().str(),
       "parameter 0's grad on " + other.str()});
}

TEST_P(OptimErrors, ClipAcrossDevices) {
  TESSERA_REQUIRE_TWO_DEVICES();
  const Device other =
      available_devices()[0] == device() ? available_devices()[1] : available_devices()[0];
  Tensor a = param(), b = ones({2}, other).requires_grad_();
  a.set_grad(ones({2}, device()));
  b.set_grad(ones({2}, other));
  expect_throw_with<DeviceMismatchError>(
      [&] {
        optim::clip_grad_norm_({a, b}, 1.0);
      },
      {"[clip_grad_norm_] gradients are on different devices", "parameter 1's on " + other.str(),
       "Move the parameters to one device", "each then by its own norm, not the norm of them all"});
}

TEST_P(OptimErrors, NegativeMaxNorm) {
  Tensor a = param();
  a.set_grad(ones({2}, device()));
  expect_throw_with<Error>([&] { optim::clip_grad_norm_({a}, -1.0); },
                           {"[clip_grad_norm_] invalid max_norm=-1", ">= 0"});
}

TEST_P(OptimErrors, NonContiguousParameterSaysHowALayersIsFixed) {
  // A layer's parameter may be given a view (Parameter::operator= shares its memory); the
  // fused steps need contiguous memory, and the message says what to assign instead.
  nn::Linear layer(3, 3, true, device());
  layer.weight = zeros({3, 3}, device()).t();
  optim::SGD sgd(layer.parameters(), {.lr = 0.1});
  for (const Tensor& p : layer.parameters()) Tensor(p).set_grad(ones_like(p));
  expect_throw_with<Error>([&] { sgd.step(); },
                           {"is not contiguous", "layer.weight = w.t()", "w.t().contiguous()"});
}

// A first step refused for lack of memory leaves no state behind: SGD kept an uninitialized
// momentum buffer and read it next step (w[0] became -89 for 0.9); Adam kept exp_avg without
// exp_avg_sq and refused every later step.
TEST_P(OptimErrors, AFirstStepOutOfMemoryLeavesNoState) {
  if (device().is_cuda()) GTEST_SKIP() << "the CPU's limit is exact enough to place";
  const auto with_grad = [&](Dtype dtype) {
    Tensor w = ones({1000}, {dtype, device()}).requires_grad_();
    sum(w).backward();
    return w;
  };
  const auto step_short_of_memory = [&](optim::Optimizer& opt, std::size_t room) {
    set_memory_limit(device(), memory_stats(device()).in_use + room);
    EXPECT_THROW(opt.step(), OutOfMemoryError);
    set_memory_limit(device(), SIZE_MAX);
  };
  Tensor w = with_grad(kFloat16);
  optim::SGD sgd({w}, {.lr = 0.1, .momentum = 0.9});
  step_short_of_memory(sgd, 2100);  // the half buffer fits, its float32 copy does not
  EXPECT_TRUE(sgd.state_dict().empty());
  sgd.step();
  EXPECT_NEAR(w.to_vector<double>()[0], 0.9, 1e-3);
  Tensor a = with_grad(kFloat32), b = with_grad(kFloat32);
  optim::Adam adam({a, b});
  step_short_of_memory(adam, 4100);  // exp_avg fits, exp_avg_sq does not
  adam.step();
  EXPECT_NEAR(a.to_vector<double>()[0], 1.0 - 1e-3, 1e-6);
}

// Half parameters step one at a time through float32 copies. When the second one's copies
// do not fit, the first was stepped and its state is kept: SGD keeps its momentum buffer
// (the retry is its second step), Adam counts its step. Queued together, the first's new
// buffer was dropped and its count taken back, so the retry stepped it as a first step again.
TEST_P(OptimErrors, AStepOutOfMemoryAtALaterHalfParameterKeepsTheEarlierOnesState) {
  if (device().is_cuda()) GTEST_SKIP() << "the CPU's limit is exact enough to place";
  const auto with_grad = [&](std::int64_t n) {
    Tensor w = ones({n}, {kFloat16, device()}).requires_grad_();
    sum(w).backward();
    return w;
  };
  const auto step_short_of_memory = [&](optim::Optimizer& opt, std::size_t room) {
    synchronize(device());
    set_memory_limit(device(), memory_stats(device()).in_use + room);
    EXPECT_THROW(opt.step(), OutOfMemoryError);
    set_memory_limit(device(), SIZE_MAX);
  };
  // a's float32 copies (param, grad, buffer: 12 KB) fit beside the two half buffers (6 KB);
  // b's (24 KB) do not.
  Tensor a = with_grad(1000), b = with_grad(2000);
  optim::SGD sgd({a, b}, {.lr = 0.1, .momentum = 0.9});
  step_short_of_memory(sgd, 19000);
  const optim::OptimizerState state = sgd.state_dict();
  EXPECT_TRUE(state.count("0.momentum_buffer")) << "a was stepped: its buffer is kept";
  EXPECT_FALSE(state.count("1.momentum_buffer"));
  EXPECT_NEAR(a.to_vector<double>()[0], 0.9, 1e-3);
  EXPECT_NEAR(b.to_vector<double>()[0], 1.0, 0);
  sgd.step();  // a's second step (buffer 1.9), b's first
  EXPECT_NEAR(a.to_vector<double>()[0], 0.9 - 0.19, 1e-3);
  EXPECT_NEAR(b.to_vector<double>()[0], 0.9, 1e-3);
  Tensor c = with_grad(1000), d = with_grad(2000);
  optim::Adam adam({c, d}, {.lr = 0.1});
  adam.step();  // makes the moments, so the next step allocates only the float32 copies
  step_short_of_memory(adam, 17000);  // c's copies (16 KB) fit, d's (32 KB) do not
  EXPECT_EQ(adam.step_count(0), 2);
  EXPECT_EQ(adam.step_count(1), 1);
}

// A step refused at parameter 2 updates no parameter: each parameter's checks ran right before
// its own kernel, so parameters 0 and 1 had moved (and their momentum advanced), and the
// retry the message invites updated them twice.
TEST_P(OptimErrors, AStepRefusedAtALaterParameterUpdatesNone) {
  for (const bool adam : {false, true}) {
    nn::Linear first(4, 4, true, device()), second(4, 4, true, device());
    second.weight = zeros({4, 4}, device()).t();  // a view: refused by the fused step
    std::vector<Tensor> params = first.parameters();
    for (const Tensor& p : second.parameters()) params.push_back(p);
    std::unique_ptr<optim::Optimizer> opt;
    if (adam) {
      opt = std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = 0.1});
    } else {
      opt = std::make_unique<optim::SGD>(params, optim::SgdOptions{.lr = 0.1, .momentum = 0.9});
    }
    for (const Tensor& p : params) Tensor(p).set_grad(ones_like(p));
    const std::vector<double> before = first.weight.to_vector<double>();
    expect_throw_with<Error>([&] { opt->step(); }, {"parameter 2 is not contiguous"});
    EXPECT_EQ(first.weight.to_vector<double>(), before) << (adam ? "Adam" : "SGD");
    EXPECT_TRUE(opt->state_dict().empty()) << (adam ? "Adam" : "SGD");
    // Fixed as the message says, one step moves every parameter once.
    second.weight = zeros({4, 4}, device());
    Tensor(second.weight).set_grad(ones({4, 4}, device()));
    opt->step();
    EXPECT_NEAR(first.weight.to_vector<double>()[0], before[0] - 0.1, 1e-6);
  }
}

// A layer moved to another device after the first step leaves its state behind; the step
// that refuses it moves no other parameter (the earlier layer's momentum advanced too).
TEST_P(OptimErrors, StateLeftOnAnotherDeviceIsRefusedBeforeAnyUpdate) {
  const std::vector<Device> devices = same_kind_devices();
  if (devices.size() < 2) GTEST_SKIP() << "needs a second device of this kind";
  nn::Linear first(3, 3, true, device()), second(3, 3, true, device());
  std::vector<Tensor> params = first.parameters();
  for (const Tensor& p : second.parameters()) params.push_back(p);
  optim::SGD sgd(params, {.lr = 0.5, .momentum = 0.9});
  for (const Tensor& p : params) Tensor(p).set_grad(ones_like(p));
  sgd.step();
  second.to(devices[1]);
  for (const Tensor& p : params) Tensor(p).set_grad(ones_like(p));
  const std::vector<double> weight = first.weight.to_vector<double>();
  const std::vector<double> buffer = sgd.state_dict().at("0.momentum_buffer").to_vector<double>();
  expect_throw_with<DeviceMismatchError>([&] { sgd.step(); },
                                         {"parameter 2 is on", "its optimizer state"});
  EXPECT_EQ(first.weight.to_vector<double>(), weight);
  EXPECT_EQ(sgd.state_dict().at("0.momentum_buffer").to_vector<double>(), buffer);
}

// load_state_dict that runs out of memory half-way keeps the old state whole: SGD had
// dropped parameter 0's buffer, Adam kept exp_avg without exp_avg_sq (state_dict() then
// threw about an undefined tensor).
TEST_P(OptimErrors, ALoadOutOfMemoryKeepsTheOldState) {
  if (device().is_cuda()) GTEST_SKIP() << "the CPU's limit is exact enough to place";
  for (const bool adam : {false, true}) {
    const std::int64_t n = 1 << 16;
    std::vector<Tensor> ps;
    for (int i = 0; i < 3; ++i) ps.push_back(ones({n}, device()).requires_grad_());
    const auto make = [&]() -> std::unique_ptr<optim::Optimizer> {
      if (adam) return std::make_unique<optim::Adam>(ps, optim::AdamOptions{.lr = 0.1});
      return std::make_unique<optim::SGD>(ps, optim::SgdOptions{.lr = 0.1, .momentum = 0.9});
    };
    auto saved_by = make();
    for (Tensor& p : ps) p.set_grad(ones({n}, device()));
    saved_by->step();
    const optim::OptimizerState saved = saved_by->state_dict();
    auto opt = make();
    ps[1].set_grad(Tensor());  // parameter 1 gets no state in this run
    for (const int i : {0, 2}) ps[static_cast<std::size_t>(i)].set_grad(full({n}, -1.0, device()));
    opt->step();
    const optim::OptimizerState before = opt->state_dict();
    synchronize(device());
    set_memory_limit(device(), memory_stats(device()).in_use + std::size_t{4} * n + 4096);
    EXPECT_THROW(opt->load_state_dict(saved), OutOfMemoryError) << (adam ? "Adam" : "SGD");
    set_memory_limit(device(), SIZE_MAX);
    const optim::OptimizerState after = opt->state_dict();
    ASSERT_EQ(after.size(), before.size()) << (adam ? "Adam" : "SGD");
    for (const auto& [key, t] : before) {
      EXPECT_EQ(after.at(key).to_vector<double>(), t.to_vector<double>()) << key;
    }
  }
}

// Clipping an expanded gradient (set_grad takes one) scales it out of place: in place it was
// refused after the earlier gradients had been clipped, and a retry clipped them twice.
TEST_P(OptimErrors, ClippingAnExpandedGradient) {
  Tensor a = zeros({4}, device()).requires_grad_(), b = zeros({4}, device()).requires_grad_();
  a.set_grad(full({4}, 3.0, device()));
  b.set_grad(full({1}, 4.0, device()).expand({4}));
  const Tensor total = optim::clip_grad_norm_({a, b}, 1.0);
  EXPECT_NEAR(total.item<double>(), 10.0, 1e-5);  // sqrt(4 * 9 + 4 * 16)
  EXPECT_NEAR(a.grad().to_vector<double>()[0], 0.3, 1e-6);
  for (const double g : b.grad().to_vector<double>()) EXPECT_NEAR(g, 0.4, 1e-6);
  EXPECT_NEAR(a.grad().to_vector<double>()[0], 0.3, 1e-6);  // clipped once
}

// A refused step is not counted: Adam's bias correction was one step ahead afterwards.
TEST_P(OptimErrors, ARefusedAdamStepIsNotCounted) {
  for (const bool capturable : {false, true}) {
    Tensor w = zeros({3, 2}, device()).t();
    w.requires_grad_();
    optim::Adam adam({w}, {.lr = 0.1});
    adam.set_capturable(capturable);
    w.set_grad(ones({2, 3}, device()));
    for (int i = 0; i < 3; ++i) EXPECT_THROW(adam.step(), Error);
    EXPECT_EQ(adam.step_count(0), 0) << (capturable ? "capturable" : "host counts");
  }
}

// A step count that is no whole number a double counts exactly (inf converted to int64 was
// undefined) is refused.
TEST_P(OptimErrors, AdamRefusesAStepCountPastTwoToThe53) {
  Tensor w = ones({2}, device()).requires_grad_();
  optim::Adam adam({w}, {.lr = 0.1});
  w.set_grad(ones({2}, device()));
  adam.step();
  optim::OptimizerState state = adam.state_dict();
  for (const double bad : {std::numeric_limits<double>::infinity(), 1e30}) {
    state["0.step"] = full({}, bad, {kFloat64, device()});
    expect_throw_with<Error>([&] { adam.load_state_dict(state); },
                             {"[Adam.load_state_dict] '0.step' is", "from 0 to 2^53"});
  }
  EXPECT_EQ(adam.step_count(0), 1);
}

// The moments weigh a gradient by 1 - beta computed in float64: 1 - float(0.99999) is 0.14%
// off, and the first step came out 0.9993 instead of 1 (torch: 1).
TEST_P(OptimErrors, AdamWeighsTheMomentsByOneMinusBetaInFloat64) {
  Tensor w = zeros({1}, device()).requires_grad_();
  optim::Adam adam({w}, {.lr = 1.0, .beta2 = 0.99999});
  w.set_grad(ones({1}, device()));
  adam.step();
  EXPECT_NEAR(w.item<double>(), -1.0, 2e-6);
}

TESSERA_INSTANTIATE_DEVICE_SUITE(OptimErrors);

}  // namespace
}  // namespace tessera
