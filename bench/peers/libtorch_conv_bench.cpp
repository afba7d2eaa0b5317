// The LibTorch peer of conv_bench.cpp: the same two convolutions through torch::conv2d, at
// LibTorch's default thread count (every core).
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include "conv_common.h"

namespace tessera::bench {
namespace {

void bm_conv_libtorch(benchmark::State& state) {
  const ConvLayer& l = conv_layer(state);
  torch::manual_seed(0);
  torch::Tensor x = torch::rand({kTrainBatch, l.in_channels, l.side, l.side});
  if (l.input_grad) x.requires_grad_();
  torch::Tensor w =
      torch::rand({l.out_channels, l.in_channels, kLeNetKernel, kLeNetKernel}).requires_grad_();
  torch::Tensor b = torch::rand({l.out_channels}).requires_grad_();
  const auto conv = [&] { return torch::conv2d(x, w, b, 1, l.padding); };
  torch::Tensor grad_y;
  {
    torch::NoGradGuard no_grad;
    grad_y = torch::ones_like(conv());
  }
  for (auto _ : state) {
    for (torch::Tensor* t : {&x, &w, &b}) t->mutable_grad() = torch::Tensor();
    conv().backward(grad_y);
  }
}

BENCHMARK(bm_conv_libtorch)->Name("conv_lenet/libtorch")->Apply(conv_settings);

}  // namespace
}  // namespace tessera::bench
