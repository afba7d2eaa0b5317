// The LibTorch peer of optimizer_bench.cpp: torch::optim::SGD (momentum 0.9) and Adam over
// the same parameters, gradients in place, one step per iteration.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "common.h"

namespace tessera::bench {
namespace {

std::vector<torch::Tensor> mlp_parameters_with_grads() {
  torch::manual_seed(0);
  std::vector<torch::Tensor> params;
  const std::vector<std::vector<std::int64_t>> shapes = {{256, 784}, {256}, {10, 256}, {10}};
  for (const std::vector<std::int64_t>& s : shapes) {
    torch::Tensor p = torch::randn(s).requires_grad_();
    p.mutable_grad() = torch::randn(s);
    params.push_back(p);
  }
  return params;
}

template <typename MakeOptimizer>
void run_steps(benchmark::State& state, MakeOptimizer make) {
  const std::vector<torch::Tensor> params = mlp_parameters_with_grads();
  std::unique_ptr<torch::optim::Optimizer> opt = make(params);
  opt->step();                       // warm-up: the first step makes the optimizer's state
  for (auto _ : state) opt->step();  // LibTorch's CPU ops run inline: nothing to wait for
}

void bm_sgd_momentum_libtorch(benchmark::State& state) {
  run_steps(state, [](const std::vector<torch::Tensor>& p) {
    return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.01).momentum(0.9));
  });
}

void bm_adam_libtorch(benchmark::State& state) {
  run_steps(state, [](const std::vector<torch::Tensor>& p) {
    return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(1e-3));
  });
}

BENCHMARK(bm_sgd_momentum_libtorch)
    ->Name("optimizer_step/libtorch/sgd_momentum")
    ->Apply(wall_time<benchmark::kMicrosecond>);
BENCHMARK(bm_adam_libtorch)
    ->Name("optimizer_step/libtorch/adam")
    ->Apply(wall_time<benchmark::kMicrosecond>);

}  // namespace
}  // namespace tessera::bench
