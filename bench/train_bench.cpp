// Training epochs end to end (forward, cross-entropy, backward, SGD step) with tessera's
// default settings: an MLP 784-256-10 and d2l's LeNet-5 on a Fashion-MNIST-sized synthetic
// data set resident on the CPU, batch 256. The peers are in peers/libtorch_train_bench.cpp.
// The loss is summed on the device and read once per epoch, as the trainer does.
#include <benchmark/benchmark.h>

#include <algorithm>

#include "common.h"
#include "tessera/tessera.h"
#include "train_common.h"

namespace tessera::bench {
namespace {

void run_epochs(benchmark::State& state, nn::Sequential net, bool images) {
  manual_seed(0);
  const Tensor x = images ? rand({kTrainImages, 1, kImageSide, kImageSide})
                          : rand({kTrainImages, kPixels});
  const Tensor y = (rand({kTrainImages}) * static_cast<double>(kClasses)).to(kInt64);
  optim::SGD opt(net.parameters(), {.lr = kTrainLr});
  std::size_t peak = 0;
  for (auto _ : state) {
    reset_peak_memory(cpu());
    const std::size_t resident = memory_stats(cpu()).in_use;
    Tensor loss_sum = zeros({});
    for (std::int64_t start = 0; start < kTrainImages; start += kTrainBatch) {
      const std::int64_t len = std::min(kTrainBatch, kTrainImages - start);
      opt.zero_grad();
      const Tensor loss = nn::cross_entropy(net(x.narrow(0, start, len)), y.narrow(0, start, len));
      loss.backward();
      opt.step();
      loss_sum.add_(loss.detach());
    }
    benchmark::DoNotOptimize(loss_sum.item<double>());
    peak = memory_stats(cpu()).peak - resident;
  }
  set_epoch_counters(state);
  // Bytes a training step holds beyond the data set, parameters and optimizer state that
  // were resident when the epoch began.
  state.counters["step_peak_MiB"] = static_cast<double>(peak) / (1 << 20);
}

void bm_mlp_epoch_tessera(benchmark::State& state) { run_epochs(state, nn::models::mlp(), false); }
void bm_lenet_epoch_tessera(benchmark::State& state) {
  run_epochs(state, nn::models::lenet(/*book=*/true), true);
}

BENCHMARK(bm_mlp_epoch_tessera)->Name("train_mlp/tessera")->Apply(epoch_settings);
BENCHMARK(bm_lenet_epoch_tessera)->Name("train_lenet/tessera")->Apply(epoch_settings);

}  // namespace
}  // namespace tessera::bench
