// Optimizer and GradScaler state_dict/load_state_dict: round trips on every device, a run
// resumed from a state_dict equal to one run straight (SGD momentum, Adam, AdamW, a float16
// style scaled loop), and every refusal's message, with the optimizer left as it was.
#include <functional>
#include <limits>
#include <memory>

#include "support/device_test.h"
#include "support/reference_optimizers.h"
#include "tessera/optim/adam.h"
#include "tessera/optim/grad_scaler.h"
#include "tessera/optim/sgd.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_close;
using testing::expect_throw_with;
using testing::random_values;

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

class OptimState : public DeviceTest {
 protected:
  std::vector<Tensor> make_params() const {
    return {testing::make_input(random_values(12, 1), {3, 4}, kFloat32, device()).requires_grad_(),
            testing::make_input(random_values(5, 2), {5}, kFloat32, device()).requires_grad_()};
  }
  // Fresh parameters holding `from`'s values.
  std::vector<Tensor> copy_params(const std::vector<Tensor>& from) const {
    std::vector<Tensor> out;
    for (const Tensor& p : from) out.push_back(p.detach().clone().requires_grad_());
    return out;
  }
  // Gives every parameter the grad of step `step` (the same for every run).
  void set_grads(std::vector<Tensor>& params, int step) const {
    for (std::size_t k = 0; k < params.size(); ++k) {
      const auto n = static_cast<std::size_t>(params[k].numel());
      params[k].set_grad(testing::make_input(random_values(n, 100 * step + k, -2, 2),
                                             params[k].shape(), kFloat32, device()));
    }
  }
  void run(optim::Optimizer& opt, std::vector<Tensor>& params, int from, int to) const {
    for (int step = from; step < to; ++step) {
      set_grads(params, step);
      opt.step();
    }
  }
  // Five steps straight against three, a state_dict, a fresh optimizer loading it, two more.
  void check_resume_equals_straight(const MakeOptimizer& make, const std::string& what) const {
    std::vector<Tensor> straight = make_params();
    std::vector<Tensor> first = copy_params(straight);
    auto opt_straight = make(straight);
    run(*opt_straight, straight, 0, 5);
    auto opt_first = make(first);
    run(*opt_first, first, 0, 3);
    const optim::OptimizerState saved = opt_first->state_dict();
    std::vector<Tensor> resumed = copy_params(first);
    auto opt_resumed = make(resumed);
    opt_resumed->load_state_dict(saved);
    run(*opt_resumed, resumed, 3, 5);
    for (std::size_t k = 0; k < straight.size(); ++k) {
      EXPECT_EQ(resumed[k].to_vector<double>(), straight[k].to_vector<double>())
          << what << " parameter " << k;
    }
  }
};

MakeOptimizer sgd_momentum() {
  return [](std::vector<Tensor> p) {
    return std::make_unique<optim::SGD>(std::move(p),
                                        optim::SgdOptions{.lr = 0.1, .momentum = 0.9});
  };
}
MakeOptimizer adam(bool capturable = false) {
  return [capturable](std::vector<Tensor> p) {
    auto opt = std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions{.lr = 0.01});
    opt->set_capturable(capturable);
    return opt;
  };
}
MakeOptimizer adamw() {
  return [](std::vector<Tensor> p) {
    return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWOptions{.lr = 0.01});
  };
}

TEST_P(OptimState, ResumedEqualsStraight) {
  check_resume_equals_straight(sgd_momentum(), "SGD momentum");
  check_resume_equals_straight(adam(), "Adam");
  check_resume_equals_straight(adam(/*capturable=*/true), "Adam capturable");
  check_resume_equals_straight(adamw(), "AdamW");
}

TEST_P(OptimState, SgdStateMatchesAFloat64Reference) {
  std::vector<Tensor> params = make_params();
  optim::SGD sgd(params, {.lr = 0.1, .momentum = 0.9});
  EXPECT_TRUE(sgd.state_dict().empty());  // no step yet
  testing::RefSgd ref{{.lr = 0.1, .momentum = 0.9}, {}};
  std::vector<double> w = params[1].to_vector<double>();
  for (int step = 0; step < 3; ++step) {
    set_grads(params, step);
    ref.step(w, params[1].grad().to_vector<double>());
    sgd.step();
  }
  const optim::OptimizerState state = sgd.state_dict();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state.at("1.momentum_buffer").device(), device());
  expect_close(state.at("1.momentum_buffer"), ref.buf, 1e-5, 1e-6, "momentum_buffer");
  // A copy: stepping again leaves the state_dict as it was.
  const std::vector<double> before = state.at("0.momentum_buffer").to_vector<double>();
  set_grads(params, 3);
  sgd.step();
  EXPECT_EQ(state.at("0.momentum_buffer").to_vector<double>(), before);
}

TEST_P(OptimState, AdamStateMatchesAFloat64Reference) {
  for (bool capturable : {false, true}) {
    std::vector<Tensor> params = make_params();
    optim::Adam opt(params, {.lr = 0.01});
    opt.set_capturable(capturable);
    testing::RefAdam ref{{.lr = 0.01}, false, {}, {}};
    std::vector<double> w = params[0].to_vector<double>();
    for (int step = 0; step < 4; ++step) {
      set_grads(params, step);
      ref.step(w, params[0].grad().to_vector<double>());
      opt.step();
    }
    const optim::OptimizerState state = opt.state_dict();
    ASSERT_EQ(state.size(), 6u);
    EXPECT_EQ(state.at("0.step").item<double>(), 4.0);
    EXPECT_EQ(state.at("0.step").device(), device());
    expect_close(state.at("0.exp_avg"), ref.m, 1e-5, 1e-7, "exp_avg");
    expect_close(state.at("0.exp_avg_sq"), ref.v, 1e-5, 1e-7, "exp_avg_sq");
  }
}

TEST_P(OptimState, LoadsStateFromAnotherDeviceByCopying) {
  TESSERA_REQUIRE_TWO_DEVICES();
  const Device other =
      available_devices()[0] == device() ? available_devices()[1] : available_devices()[0];
  std::vector<Tensor> params = make_params();
  optim::Adam opt(params, {.lr = 0.01});
  set_grads(params, 0);
  opt.step();
  optim::OptimizerState moved;
  for (const auto& [key, t] : opt.state_dict()) moved.emplace(key, t.to(other));
  std::vector<Tensor> fresh = copy_params(params);
  optim::Adam loaded(fresh, {.lr = 0.01});
  loaded.load_state_dict(moved);
  for (const auto& [key, t] : loaded.state_dict()) {
    EXPECT_EQ(t.device(), device()) << key;
    EXPECT_EQ(t.to_vector<double>(), moved.at(key).to_vector<double>()) << key;
  }
}

// A half-precision copy of a float32 run resumes its optimizer too: a floating buffer of
// another floating dtype is converted to its parameter's, as PyTorch does (it was refused).
TEST_P(OptimState, BuffersOfAnotherFloatingDtypeAreConverted) {
  std::vector<Tensor> params = make_params();
  optim::Adam adam(params, {.lr = 0.01});
  set_grads(params, 0);
  adam.step();
  std::vector<Tensor> halves;
  for (const Tensor& p : params) halves.push_back(p.detach().to(kFloat16).requires_grad_());
  optim::Adam half(halves, {.lr = 0.01});
  half.load_state_dict(adam.state_dict());
  const optim::OptimizerState loaded = half.state_dict();
  for (const char* key : {"0.exp_avg", "0.exp_avg_sq", "1.exp_avg"}) {
    EXPECT_EQ(loaded.at(key).dtype(), kFloat16) << key;
    EXPECT_EQ(loaded.at(key).to_vector<double>(),
              adam.state_dict().at(key).to(kFloat16).to_vector<double>())
        << key;
  }
  EXPECT_EQ(loaded.at("0.step").dtype(), kFloat64);
}

TEST_P(OptimState, RefusesMismatchesAndChangesNothing) {
  std::vector<Tensor> params = make_params();
  optim::SGD sgd(params, {.lr = 0.1, .momentum = 0.9});
  set_grads(params, 0);
  sgd.step();
  const optim::OptimizerState good = sgd.state_dict();
  const std::vector<double> before = good.at("0.momentum_buffer").to_vector<double>();
  auto with = [&](const std::string& key, const Tensor& t) {
    optim::OptimizerState s = good;
    s[key] = t;
    return s;
  };
  const Tensor buf0 = good.at("0.momentum_buffer");
  expect_throw_with<Error>(
      [&] { sgd.load_state_dict(with("0.exp_avg", buf0)); },
      {"[SGD.load_state_dict] unknown key '0.exp_avg'",
       "SGD keeps momentum_buffer, momentum_unwritten per parameter", "another kind of optimizer",
       // It said to load it into an SGD, which the user had just done.
       "Load it into the kind that saved it"});
  expect_throw_with<Error>([&] { sgd.load_state_dict(with("momentum", buf0)); },
                           {"unknown key 'momentum'", "'<parameter index>.<name>'",
                            "Load a state_dict saved from a SGD"});
  expect_throw_with<Error>(
      [&] { sgd.load_state_dict(with("2.momentum_buffer", buf0)); },
      {"key '2.momentum_buffer' names parameter 2 but this SGD has 2 parameters"});
  expect_throw_with<ShapeError>(
      [&] { sgd.load_state_dict(with("1.momentum_buffer", buf0)); },
      {"'1.momentum_buffer' has shape [3, 4] but this optimizer keeps it as [5]"});
  expect_throw_with<DtypeError>(
      [&] { sgd.load_state_dict(with("0.momentum_buffer", buf0.to(kInt64))); },
      {"'0.momentum_buffer' is int64 but this optimizer keeps it as float32"});
  optim::SGD plain(copy_params(params), {.lr = 0.1});
  expect_throw_with<Error>([&] { plain.load_state_dict(good); },
                           {"given to an SGD with momentum=0"});
  optim::OptimizerState half = good;
  half.erase("0.momentum_buffer");
  half["0.momentum_unwritten"] = zeros({}, {kFloat32, device()});
  expect_throw_with<Error>([&] { sgd.load_state_dict(half); },
                           {"'0.momentum_unwritten' without '0.momentum_buffer'"});
  EXPECT_EQ(sgd.state_dict().at("0.momentum_buffer").to_vector<double>(), before);

  optim::Adam adam_opt(params, {.lr = 0.01});
  adam_opt.step();
  optim::OptimizerState adam_state = adam_opt.state_dict();
  expect_throw_with<Error>([&] { adam_opt.load_state_dict(good); },
                           {"[Adam.load_state_dict] unknown key '0.momentum_buffer'"});
  adam_state.erase("1.step");
  expect_throw_with<Error>([&] { adam_opt.load_state_dict(adam_state); },
                           {"parameter 1's state is incomplete", "'1.step'"});
  adam_state["1.step"] = full({}, 1.5, {kFloat64, device()});
  expect_throw_with<Error>([&] { adam_opt.load_state_dict(adam_state); },
                           {"'1.step' is 1.5; a step count is a whole number from 0 to 2^53"});
  EXPECT_EQ(adam_opt.step_count(1), 1);
}

class ScalerState : public DeviceTest {};

TEST_P(ScalerState, ResumedScaledLoopEqualsStraight) {
  // A scaled SGD loop with an overflow at step 2 and growth every 2 clean steps: saving the
  // optimizer and scaler after step 3 and resuming in fresh objects ends where running
  // straight does, scale included.
  auto loop = [&](optim::SGD& opt, optim::GradScaler& scaler, std::vector<Tensor>& params, int from,
                  int to) {
    for (int step = from; step < to; ++step) {
      (void)scaler.scale(zeros({}, device()));
      const double s = scaler.get_scale();
      std::vector<double> g = random_values(4, step, -1, 1);
      for (double& v : g) v *= s;
      if (step == 2) g[1] = std::numeric_limits<double>::infinity();
      params[0].set_grad(from_vector(g, {4}, {kFloat32, device()}));
      scaler.step(opt);
      scaler.update();
    }
  };
  const optim::GradScalerOptions so{.init_scale = 256, .growth_interval = 2};
  const optim::SgdOptions o{.lr = 0.1, .momentum = 0.9};
  std::vector<Tensor> straight{
      from_vector(random_values(4, 9), {4}, {kFloat32, device()}).requires_grad_()};
  std::vector<Tensor> first{straight[0].detach().clone().requires_grad_()};
  optim::SGD opt_straight(straight, o), opt_first(first, o);
  optim::GradScaler scaler_straight(so), scaler_first(so);
  loop(opt_straight, scaler_straight, straight, 0, 7);
  loop(opt_first, scaler_first, first, 0, 3);
  const auto opt_state = opt_first.state_dict();
  const auto scaler_state = scaler_first.state_dict();
  EXPECT_EQ(scaler_state.at("growth_tracker").item<double>(), 0.0);  // backed off at step 2
  std::vector<Tensor> resumed{first[0].detach().clone().requires_grad_()};
  optim::SGD opt_resumed(resumed, o);
  optim::GradScaler scaler_resumed(so);
  opt_resumed.load_state_dict(opt_state);
  scaler_resumed.load_state_dict(scaler_state);  // before its first scale()
  EXPECT_EQ(scaler_resumed.get_scale(), scaler_first.get_scale());
  loop(opt_resumed, scaler_resumed, resumed, 3, 7);
  EXPECT_EQ(resumed[0].to_vector<double>(), straight[0].to_vector<double>());
  EXPECT_EQ(scaler_resumed.get_scale(), scaler_straight.get_scale());
  EXPECT_EQ(scaler_resumed.state_dict().at("growth_tracker").item<double>(),
            scaler_straight.state_dict().at("growth_tracker").item<double>());
  EXPECT_EQ(scaler_resumed.scale_tensor().device(), device());
}

TEST_P(ScalerState, LoadsAfterTheFirstScaleInPlace) {
  optim::GradScaler scaler({.growth_interval = 10});
  (void)scaler.scale(zeros({}, device()));
  const Tensor handle = scaler.scale_tensor();
  scaler.load_state_dict({{"scale", full({}, 512.0)}, {"growth_tracker", full({}, 3.0)}});
  EXPECT_EQ(handle.item<double>(), 512.0);  // the same tensor, written in place
  EXPECT_EQ(scaler.state_dict().at("growth_tracker").item<double>(), 3.0);
  EXPECT_EQ(scaler.state_dict().at("scale").device(), device());
}

TEST_P(ScalerState, RefusesBadStateAndChangesNothing) {
  optim::GradScaler scaler({.init_scale = 128, .growth_interval = 4});
  const auto ok = scaler.state_dict();
  EXPECT_EQ(ok.at("scale").item<double>(), 128.0);
  auto with = [&](const std::string& key, const Tensor& t) {
    auto s = ok;
    s[key] = t;
    return s;
  };
  expect_throw_with<Error>([&] { scaler.load_state_dict(with("scal", full({}, 1.0))); },
                           {"[GradScaler.load_state_dict] unknown key 'scal'"});
  expect_throw_with<Error>(
      [&] {
        scaler.load_state_dict({{"scale", full({}, 1.0)}});
      },
      {"missing key 'growth_tracker'"});
  expect_throw_with<Error>([&] { scaler.load_state_dict(with("scale", full({}, -2.0))); },
                           {"'scale' is -2; it must be a finite number > 0"});
  expect_throw_with<Error>(
      [&] { scaler.load_state_dict(with("growth_tracker", full({}, 4.0))); },
      {"'growth_tracker' is 4; it must be a whole number in [0, 4)", "growth_interval"});
  expect_throw_with<DtypeError>(
      [&] {
        scaler.load_state_dict(with("scale", full({}, 1.0, {kFloat64, cpu()})));
      },
      {"'scale' is float64; it must be float32"});
  expect_throw_with<ShapeError>([&] { scaler.load_state_dict(with("scale", ones({1}))); },
                                {"'scale' has shape [1]; it must be 0-dim"});
  EXPECT_EQ(scaler.get_scale(), 128.0);
}

TESSERA_INSTANTIATE_DEVICE_SUITE(OptimState);
TESSERA_INSTANTIATE_DEVICE_SUITE(ScalerState);

}  // namespace
}  // namespace tessera
