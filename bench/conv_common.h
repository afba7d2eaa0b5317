#pragma once
// The convolution benchmarks' shared setup (tessera's and LibTorch's use the same): the two
// convolutions of d2l's LeNet-5 at the training benchmarks' batch of 256, 5x5 kernels,
// stride 1. One iteration is one training step's worth of the layer: forward, then backward
// to the weight and bias (and to the input for the second layer, as in training; nothing
// needs the first layer's input gradient).
#include <benchmark/benchmark.h>

#include <cstdint>

#include "common.h"
#include "train_common.h"

namespace tessera::bench {

struct ConvLayer {
  std::int64_t in_channels, side, out_channels, padding;
  bool input_grad;
};

inline constexpr ConvLayer kLeNetConvs[] = {{1, 28, 6, 2, false},   // 1 x 28 x 28 -> 6 x 28 x 28
                                            {6, 14, 16, 0, true}};  // 6 x 14 x 14 -> 16 x 10 x 10
inline constexpr std::int64_t kLeNetKernel = 5;

/// Args 1 and 2: the layer; microseconds on the wall clock (Note [Timing]).
inline void conv_settings(benchmark::internal::Benchmark* b) {
  wall_time<benchmark::kMicrosecond>(b->Arg(1)->Arg(2));
}

inline const ConvLayer& conv_layer(const benchmark::State& state) {
  return kLeNetConvs[state.range(0) - 1];
}

}  // namespace tessera::bench
