// SGD, Adam and AdamW against a float64 host reference of PyTorch's formulas, minimizing a
// quadratic, and skipping parameters without a grad.
#include <cmath>
#include <functional>
#include <memory>

#include "support/device_test.h"
#include "support/reference_optimizers.h"
#include "tessera/optim/adam.h"
#include "tessera/optim/sgd.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_close;
using testing::random_values;
using testing::RefAdam;
using testing::RefSgd;

class Optim : public DeviceTest {
 protected:
  // Runs `steps` steps of `opt` over two parameters with fresh random grads each step and
  // compares with `ref` (one reference per parameter) after every step.
  template <typename Ref>
  void check_against(
      Dtype dtype,
      const std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>& make, Ref ref0,
      const std::string& what) {
    const double tol = dtype == kFloat64 ? 1e-12 : 2e-5;
    std::vector<Tensor> params{
        testing::make_input(random_values(12, 1), {3, 4}, dtype, device()).requires_grad_(),
        testing::make_input(random_values(5, 2), {5}, dtype, device()).requires_grad_()};
    std::vector<std::vector<double>> w{params[0].to_vector<double>(),
                                       params[1].to_vector<double>()};
    std::vector<Ref> refs{ref0, ref0};
    auto opt = make(params);
    for (int step = 0; step < 3; ++step) {
      for (std::size_t k = 0; k < params.size(); ++k) {
        const Tensor g = testing::make_input(random_values(w[k].size(), 10 * step + k + 7, -2, 2),
                                             params[k].shape(), dtype, device());
        params[k].set_grad(g);
        refs[k].step(w[k], g.to_vector<double>());
      }
      opt->step();
      for (std::size_t k = 0; k < params.size(); ++k) {
        EXPECT_EQ(params[k].device(), device());
        expect_close(params[k], w[k], tol, tol,
                     what + " " + std::string(dtype_name(dtype)) + " step " + std::to_string(step) +
                         " param " + std::to_string(k));
      }
      opt->zero_grad();
      EXPECT_FALSE(params[0].grad().defined());
    }
  }
};

TEST_P(Optim, SgdMatchesPyTorchFormulas) {
  const std::vector<std::pair<std::string, optim::SgdOptions>> cases{
      {"plain", {.lr = 0.1}},
      {"momentum", {.lr = 0.05, .momentum = 0.9}},
      {"dampening", {.lr = 0.05, .momentum = 0.9, .dampening = 0.3}},
      {"nesterov", {.lr = 0.05, .momentum = 0.8, .nesterov = true}},
      {"weight_decay", {.lr = 0.1, .momentum = 0.5, .weight_decay = 0.01}},
      {"weight_decay_plain", {.lr = 0.1, .weight_decay = 0.1}}};
  for (Dtype dtype : {kFloat32, kFloat64}) {
    for (const auto& [name, o] : cases) {
      check_against<RefSgd>(
          dtype, [o](std::vector<Tensor> p) { return std::make_unique<optim::SGD>(p, o); },
          RefSgd{o, {}}, "SGD " + name);
    }
  }
}

TEST_P(Optim, AdamAndAdamWMatchPyTorchFormulas) {
  for (Dtype dtype : {kFloat32, kFloat64}) {
    const optim::AdamOptions plain{.lr = 0.01};
    check_against<RefAdam>(
        dtype, [&](std::vector<Tensor> p) { return std::make_unique<optim::Adam>(p, plain); },
        RefAdam{plain}, "Adam");
    const optim::AdamOptions l2{
        .lr = 0.02, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1};
    check_against<RefAdam>(
        dtype, [&](std::vector<Tensor> p) { return std::make_unique<optim::Adam>(p, l2); },
        RefAdam{l2}, "Adam weight_decay");
    const optim::AdamWOptions w{.lr = 0.02, .weight_decay = 0.1};
    check_against<RefAdam>(
        dtype, [&](std::vector<Tensor> p) { return std::make_unique<optim::AdamW>(p, w); },
        RefAdam{{w.lr, w.beta1, w.beta2, w.eps, w.weight_decay}, /*decoupled=*/true}, "AdamW");
  }
}

TEST_P(Optim, CapturableAdamMatchesPyTorchFormulas) {
  for (Dtype dtype : {kFloat32, kFloat64}) {
    const optim::AdamOptions o{.lr = 0.02, .beta1 = 0.8, .beta2 = 0.99, .weight_decay = 0.1};
    check_against<RefAdam>(
        dtype,
        [&](std::vector<Tensor> p) {
          auto adam = std::make_unique<optim::Adam>(p, o);
          adam->set_capturable(true);
          return adam;
        },
        RefAdam{o}, "capturable Adam");
    const optim::AdamWOptions w{.lr = 0.02, .weight_decay = 0.1};
    check_against<RefAdam>(
        dtype,
        [&](std::vector<Tensor> p) {
          auto adam = std::make_unique<optim::AdamW>(p, w);
          adam->set_capturable(true);
          return adam;
        },
        RefAdam{{w.lr, w.beta1, w.beta2, w.eps, w.weight_decay}, /*decoupled=*/true},
        "capturable AdamW");
  }
}

// A recorded step replays as the next step: its bias corrections come from the device's
// count, not from the step that was recorded.
TEST_P(Optim, RecordedAdamStepsReplayAsTheNextSteps) {
  const optim::AdamOptions o{.lr = 0.05};
  Tensor p = testing::make_input(random_values(6, 3), {6}, kFloat32, device()).requires_grad_();
  std::vector<double> w = p.to_vector<double>();
  const std::vector<double> g = random_values(6, 4, -1, 1);
  p.set_grad(testing::make_input(g, {6}, kFloat32, device()));
  optim::Adam adam({p}, o);
  RefAdam ref{o};
  adam.step();  // the first step eagerly, then capturable from step 2 on
  ref.step(w, g);
  adam.set_capturable(true);
  EXPECT_EQ(adam.step_count(0), 1);
  Graph graph = Graph::capture(device(), [&] { adam.step(); });
  for (int i = 0; i < 4; ++i) {
    graph.replay();
    ref.step(w, g);
  }
  expect_close(p, w, 2e-5, 2e-5, "after 4 replays");
  EXPECT_EQ(adam.step_count(0), 5);
  adam.set_capturable(false);  // back to host counts, continuing from the device's
  EXPECT_EQ(adam.step_count(0), 5);
  adam.step();
  ref.step(w, g);
  expect_close(p, w, 2e-5, 2e-5, "an eager step after the replays");
}

TEST_P(Optim, ParametersWithoutGradAreSkipped) {
  Tensor a = ones({3}, device()).requires_grad_();
  Tensor b = ones({2}, device()).requires_grad_();
  optim::Adam opt({a, b}, {.lr = 0.1});
  a.set_grad(ones({3}, device()));
  opt.step();
  EXPECT_EQ(b.to_vector<double>(), (std::vector<double>{1, 1}));
  EXPECT_EQ(opt.step_count(0), 1);
  EXPECT_EQ(opt.step_count(1), 0);
  expect_close(a, {0.9, 0.9, 0.9}, 1e-6, 1e-6);  // Adam's first step moves by lr
  optim::SGD sgd({a, b}, {.lr = 0.5, .momentum = 0.9});
  sgd.step();  // b has no grad; a's grad is ones
  EXPECT_EQ(b.to_vector<double>(), (std::vector<double>{1, 1}));
  expect_close(a, {0.4, 0.4, 0.4}, 1e-6, 1e-6);
}

// Parameters of one optimizer are stepped together (Backend::sgd_steps, adam_steps): more of
// them than one GPU launch takes (16), of two dtypes, one empty and one large, each must
// still get its own update.
TEST_P(Optim, ManyParametersOfTwoDtypesStepTogether) {
  constexpr int kParams = 21;
  const auto sizes = [](int k) -> std::int64_t {
    if (k == 3) return 0;
    if (k == 17) return 70000;  // several blocks on a GPU, several threads on the CPU
    return 7 * k + 1;
  };
  const auto dtype_of = [](int k) { return k % 3 == 1 ? kFloat64 : kFloat32; };
  const optim::SgdOptions so{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01};
  const optim::AdamWOptions ao{.lr = 0.02, .weight_decay = 0.1};
  for (const bool adam : {false, true}) {
    std::vector<Tensor> params;
    std::vector<std::vector<double>> w;
    for (int k = 0; k < kParams; ++k) {
      const auto n = static_cast<std::size_t>(sizes(k));
      params.push_back(
          testing::make_input(random_values(n, k + 1), {sizes(k)}, dtype_of(k), device())
              .requires_grad_());
      w.push_back(params.back().to_vector<double>());
    }
    std::unique_ptr<optim::Optimizer> opt;
    if (adam) {
      opt = std::make_unique<optim::AdamW>(params, ao);
    } else {
      opt = std::make_unique<optim::SGD>(params, so);
    }
    std::vector<RefSgd> sgd_refs(kParams, RefSgd{so, {}});
    std::vector<RefAdam> adam_refs(
        kParams, RefAdam{{ao.lr, ao.beta1, ao.beta2, ao.eps, ao.weight_decay}, true});
    for (int step = 0; step < 3; ++step) {
      for (int k = 0; k < kParams; ++k) {
        if (k == 5 && step == 1) {
          params[k].set_grad(Tensor());  // skipped this step, stepped the others
          continue;
        }
        const Tensor g = testing::make_input(random_values(w[k].size(), 100 * step + k, -2, 2),
                                             params[k].shape(), dtype_of(k), device());
        params[k].set_grad(g);
        if (adam) {
          adam_refs[k].step(w[k], g.to_vector<double>());
        } else {
          sgd_refs[k].step(w[k], g.to_vector<double>());
        }
      }
      opt->step();
      for (int k = 0; k < kParams; ++k) {
        const double tol = dtype_of(k) == kFloat64 ? 1e-12 : 2e-5;
        expect_close(params[k], w[k], tol, tol,
                     std::string(adam ? "AdamW" : "SGD") + " step " + std::to_string(step) +
                         " param " + std::to_string(k));
      }
    }
  }
}

// An optimizer over a model split across two devices steps each device's parameters on that
// device (one backend call per device: Backend::sgd_steps takes one device's tensors).
TEST_P(Optim, ParametersOnTwoDevicesStepOnEach) {
  if (device() == cpu(0)) GTEST_SKIP() << "needs a second device: TESSERA_CPU_DEVICES=2 or a GPU";
  const optim::SgdOptions o{.lr = 0.1, .momentum = 0.9};
  const Device devices[] = {device(), cpu(0), device(), cpu(0)};
  std::vector<Tensor> params;
  std::vector<std::vector<double>> w;
  std::vector<RefSgd> refs(4, RefSgd{o, {}});
  for (int k = 0; k < 4; ++k) {
    params.push_back(testing::make_input(random_values(k + 3, k), {k + 3}, kFloat32, devices[k])
                         .requires_grad_());
    w.push_back(params.back().to_vector<double>());
  }
  optim::SGD sgd(params, o);
  for (int step = 0; step < 2; ++step) {
    for (int k = 0; k < 4; ++k) {
      const std::vector<double> g = random_values(k + 3, 10 * step + k, -1, 1);
      params[k].set_grad(testing::make_input(g, {k + 3}, kFloat32, devices[k]));
      refs[k].step(w[k], g);
    }
    sgd.step();
  }
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(params[k].device(), devices[k]);
    expect_close(params[k], w[k], 2e-5, 2e-5, "param " + std::to_string(k));
  }
}

// A recorded step holds one node for the optimizer: one task on a CPU device, one kernel per
// 16 parameters on a GPU. Its replays are the next steps.
TEST_P(Optim, ARecordedStepHoldsOneNodeForTheParameters) {
  constexpr int kParams = 20;
  const optim::SgdOptions o{.lr = 0.1, .momentum = 0.9};
  std::vector<Tensor> params;
  std::vector<std::vector<double>> w, g;
  std::vector<RefSgd> refs(kParams, RefSgd{o, {}});
  for (int k = 0; k < kParams; ++k) {
    params.push_back(
        testing::make_input(random_values(k + 2, k), {k + 2}, kFloat32, device()).requires_grad_());
    w.push_back(params.back().to_vector<double>());
    g.push_back(random_values(k + 2, 50 + k, -1, 1));
    params.back().set_grad(testing::make_input(g.back(), {k + 2}, kFloat32, device()));
  }
  optim::SGD sgd(params, o);
  sgd.step();  // the first step makes the momentum buffers, outside the recording
  for (int k = 0; k < kParams; ++k) refs[k].step(w[k], g[k]);
  const Graph graph = Graph::capture(device(), [&] { sgd.step(); });
  EXPECT_EQ(graph.node_count(), device().is_cuda() ? 2u : 1u);
  for (int replay = 0; replay < 2; ++replay) {
    graph.replay();
    for (int k = 0; k < kParams; ++k) refs[k].step(w[k], g[k]);
  }
  for (int k = 0; k < kParams; ++k) {
    expect_close(params[k], w[k], 2e-5, 2e-5, "after 2 replays, param " + std::to_string(k));
  }
}

TEST_P(Optim, MinimizesAQuadratic) {
  const Tensor target = tensor({1.5, -2.0, 0.25}, device());
  using Make = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;
  const std::vector<Make> makers{
      [](auto p) {
        return std::make_unique<optim::SGD>(
            p, optim::SgdOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
      },
      [](auto p) { return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 0.05}); },
      [](auto p) {
        return std::make_unique<optim::AdamW>(p,
                                              optim::AdamWOptions{.lr = 0.05, .weight_decay = 0});
      }};
  for (std::size_t which = 0; which < makers.size(); ++which) {
    Tensor x = zeros({3}, device()).requires_grad_();
    const auto opt = makers[which]({x});
    for (int step = 0; step < 400; ++step) {
      opt->zero_grad();
      sum(pow(x - target, 2.0)).backward();
      opt->step();
    }
    expect_close(x, {1.5, -2.0, 0.25}, 0, 1e-2, "optimizer " + std::to_string(which));
  }
}

TEST_P(Optim, LargeParametersAreSplitAcrossThreads) {
  const std::int64_t n = 1 << 17;  // past the CPU kernels' parallel grain
  Tensor a = ones({n}, device()).requires_grad_();
  Tensor b = ones({n}, {kFloat64, device()}).requires_grad_();
  optim::SGD sgd({a}, {.lr = 0.5, .momentum = 0.9});
  optim::AdamW adamw({b}, {.lr = 0.1, .weight_decay = 0.5});
  a.set_grad(ones({n}, device()));
  b.set_grad(full({n}, -3.0, {kFloat64, device()}));
  sgd.step();
  adamw.step();
  expect_close(a, std::vector<double>(n, 0.5), 0, 1e-7);
  expect_close(b, std::vector<double>(n, 1 * (1 - 0.05) + 0.1), 1e-9, 1e-9);
}

TEST_P(Optim, LearningRateCanChange) {
  Tensor x = ones({2}, device()).requires_grad_();
  optim::SGD opt({x}, {.lr = 0.1});
  opt.set_lr(0.5);
  EXPECT_EQ(opt.lr(), 0.5);
  x.set_grad(ones({2}, device()));
  opt.step();
  expect_close(x, {0.5, 0.5}, 0, 1e-7);
}

TEST_P(Optim, AStepBetweenForwardAndBackwardIsRefused) {
  // The fused steps write parameters in place: a graph that saved them must not run on.
  Tensor w = ones({2, 2}, device()).requires_grad_();
  const Tensor x = ones({3, 2}, device()).requires_grad_();
  w.set_grad(ones({2, 2}, device()));
  optim::SGD sgd({w}, {.lr = 0.1, .momentum = 0.9});
  Tensor loss = sum(matmul(x, w));
  sgd.step();
  testing::expect_throw_with<Error>([&] { loss.backward(); },
                                    {"[backward] matmul saved its other", "written in place"});
  optim::Adam adam({w}, {.lr = 0.1});
  Tensor again = sum(matmul(x, w));
  adam.step();
  testing::expect_throw_with<Error>([&] { again.backward(); }, {"matmul saved its other"});
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Optim);

}  // namespace
}  // namespace tessera
