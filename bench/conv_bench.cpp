// LeNet's two convolutions, forward and backward, with tessera's defaults (on the CPU: the
// direct kernels of Note [Direct convolution]). The LibTorch peer is in
// peers/libtorch_conv_bench.cpp; the epoch these steps belong to is in train_bench.cpp.
#include <benchmark/benchmark.h>

#include "conv_common.h"
#include "tessera/tessera.h"

namespace tessera::bench {
namespace {

void bm_conv_tessera(benchmark::State& state) {
  const ConvLayer& l = conv_layer(state);
  manual_seed(0);
  Tensor x = rand({kTrainBatch, l.in_channels, l.side, l.side});
  if (l.input_grad) x.requires_grad_();
  Tensor w = rand({l.out_channels, l.in_channels, kLeNetKernel, kLeNetKernel}).requires_grad_();
  Tensor b = rand({l.out_channels}).requires_grad_();
  const int pad = static_cast<int>(l.padding);
  const Conv2dOptions options{.padding = {pad, pad}};
  const Tensor grad_y = ones_like(conv2d(x.detach(), w.detach(), b.detach(), options));
  for (auto _ : state) {
    for (Tensor* t : {&x, &w, &b}) t->set_grad(Tensor());  // as zero_grad does each step
    conv2d(x, w, b, options).backward(grad_y);
    synchronize(cpu());
  }
}

BENCHMARK(bm_conv_tessera)->Name("conv_lenet/tessera")->Apply(conv_settings);

}  // namespace
}  // namespace tessera::bench
