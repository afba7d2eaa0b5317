#pragma once
// The training-epoch benchmarks' shared setup (tessera's and LibTorch's use the same): a
// synthetic data set shaped like Fashion-MNIST's training set, batch 256, SGD. The data's
// values do not change the work, so random images stand in for the real files here (the
// trainer issue benchmarks the real data set end to end).
#include <benchmark/benchmark.h>

#include <cstdint>

#include "common.h"

namespace tessera::bench {

inline constexpr std::int64_t kTrainImages = 60000;
inline constexpr std::int64_t kImageSide = 28;
inline constexpr std::int64_t kPixels = kImageSide * kImageSide;
inline constexpr std::int64_t kClasses = 10;
inline constexpr std::int64_t kTrainBatch = 256;
inline constexpr double kTrainLr = 0.1;

/// images/s over the whole epoch, and the epoch's batches.
inline void set_epoch_counters(benchmark::State& state) {
  state.counters["images_per_s"] = benchmark::Counter(
      static_cast<double>(kTrainImages) * state.iterations(), benchmark::Counter::kIsRate);
}

/// One epoch per iteration, timed on the wall clock in milliseconds (Note [Timing]).
inline void epoch_settings(benchmark::internal::Benchmark* b) {
  wall_time<benchmark::kMillisecond>(b->Iterations(1));
}

}  // namespace tessera::bench
