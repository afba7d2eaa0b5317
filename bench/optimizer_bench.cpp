// One optimizer step over the book's MLP parameters (784x256, 256, 256x10, 10: 203,530
// floats) with gradients already in place: the fused per-parameter kernels alone, SGD with
// momentum (LeNet's default) and Adam. Peers: peers/libtorch_optimizer_bench.cpp (same
// process) and peers/pytorch_optimizer.py (PyTorch 2.x's foreach and fused CPU steps).
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "common.h"
#include "tessera/tessera.h"

namespace tessera::bench {
namespace {

std::vector<Tensor> mlp_parameters_with_grads() {
  manual_seed(0);
  std::vector<Tensor> params;
  for (const Shape& s : {Shape{256, 784}, Shape{256}, Shape{10, 256}, Shape{10}}) {
    Tensor p = randn(s).requires_grad_();
    p.set_grad(randn(s));
    params.push_back(p);
  }
  return params;
}

template <typename MakeOptimizer>
void run_steps(benchmark::State& state, MakeOptimizer make) {
  const std::vector<Tensor> params = mlp_parameters_with_grads();
  std::unique_ptr<optim::Optimizer> opt = make(params);
  const Device device = params.front().device();
  opt->step();  // warm-up: the first step makes the optimizer's state
  for (auto _ : state) {
    opt->step();
    synchronize(device);  // Note [Timing]; the plain CPU ran the step inline already
  }
}

void bm_sgd_momentum_tessera(benchmark::State& state) {
  run_steps(state, [](const std::vector<Tensor>& p) {
    return std::make_unique<optim::SGD>(p, optim::SgdOptions{.lr = 0.01, .momentum = 0.9});
  });
}

void bm_adam_tessera(benchmark::State& state) {
  run_steps(state, [](const std::vector<Tensor>& p) {
    return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 1e-3});
  });
}

BENCHMARK(bm_sgd_momentum_tessera)
    ->Name("optimizer_step/tessera/sgd_momentum")
    ->Apply(wall_time<benchmark::kMicrosecond>);
BENCHMARK(bm_adam_tessera)
    ->Name("optimizer_step/tessera/adam")
    ->Apply(wall_time<benchmark::kMicrosecond>);

}  // namespace
}  // namespace tessera::bench
