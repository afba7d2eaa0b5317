// Training epochs end to end (forward, cross-entropy, backward, SGD step) with tessera's
// default settings: an MLP 784-256-10 and d2l's LeNet-5 on a Fashion-MNIST-sized synthetic
// data set resident on the CPU, batch 256. The peers are in peers/libtorch_train_bench.cpp.
// The loss is summed on the device and read once per epoch, as the trainer does. The MLP
// also runs fed by the DataLoader from uint8 images (train_mlp_loader/tessera/prefetch:2 and :0),
// as `tessera train`.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <vector>

#include "common.h"
#include "tessera/tessera.h"
#include "train_common.h"

namespace tessera::bench {
namespace {

void run_epochs(benchmark::State& state, nn::Sequential net, bool images) {
  manual_seed(0);
  const Tensor x =
      images ? rand({kTrainImages, 1, kImageSide, kImageSide}) : rand({kTrainImages, kPixels});
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

// The MLP epoch again as `tessera train` feeds it: uint8 images in host memory, shuffled and
// gathered into float32 batches by the DataLoader, with a prefetch thread (prefetch = 2, the
// default on a machine with a GPU) and without (prefetch = 0, the default without one).
// Compare with train_mlp/tessera (data resident as float32).
void bm_mlp_epoch_loader(benchmark::State& state) {
  const std::int64_t prefetch = state.range(0);
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(kTrainImages * kPixels));
  std::vector<std::int64_t> labels(static_cast<std::size_t>(kTrainImages));
  for (std::size_t i = 0; i < pixels.size(); ++i)
    pixels[i] = static_cast<std::uint8_t>(i * 7 % 251);
  for (std::size_t i = 0; i < labels.size(); ++i)
    labels[i] = static_cast<std::int64_t>(i % kClasses);
  data::DataLoader loader(from_vector(pixels, {kTrainImages, kPixels}),
                          from_vector(labels, {kTrainImages}),
                          {.batch_size = kTrainBatch, .prefetch = prefetch});
  manual_seed(0);
  nn::Sequential net = nn::models::mlp();
  optim::SGD opt(net.parameters(), {.lr = kTrainLr});
  for (auto _ : state) {
    Tensor loss_sum = zeros({});
    for (const data::Batch& b : loader) {
      const data::Batch batch = data::to_device(b, cpu());  // as Trainer::prepare_batch
      opt.zero_grad();
      const Tensor loss = nn::cross_entropy(net(batch.x), batch.y);
      loss.backward();
      opt.step();
      loss_sum.add_(loss.detach());
    }
    benchmark::DoNotOptimize(loss_sum.item<double>());
  }
  set_epoch_counters(state);
}

BENCHMARK(bm_mlp_epoch_tessera)->Name("train_mlp/tessera")->Apply(epoch_settings);
BENCHMARK(bm_mlp_epoch_loader)
    ->Name("train_mlp_loader/tessera")
    ->ArgName("prefetch")
    ->Arg(2)
    ->Arg(0)
    ->Apply(epoch_settings);
BENCHMARK(bm_lenet_epoch_tessera)->Name("train_lenet/tessera")->Apply(epoch_settings);

}  // namespace
}  // namespace tessera::bench
