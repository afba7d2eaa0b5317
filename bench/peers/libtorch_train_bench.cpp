// The LibTorch peer of train_bench.cpp: the same MLP and LeNet epochs through torch::nn and
// torch::optim::SGD. Each runs at 1 thread and at every core, so docs/benchmarks.md can
// compare tessera's default against LibTorch's best setting.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <malloc.h>

#include <algorithm>

#include "common.h"
#include "train_common.h"

namespace tessera::bench {
namespace {

namespace tnn = torch::nn;

tnn::Sequential make_mlp() {
  return tnn::Sequential(tnn::Flatten(), tnn::Linear(kPixels, 256), tnn::ReLU(),
                         tnn::Linear(256, kClasses));
}

// d2l's LeNet-5: sigmoid activations and average pooling.
tnn::Sequential make_lenet() {
  return tnn::Sequential(tnn::Conv2d(tnn::Conv2dOptions(1, 6, 5).padding(2)), tnn::Sigmoid(),
                         tnn::AvgPool2d(tnn::AvgPool2dOptions(2).stride(2)),
                         tnn::Conv2d(tnn::Conv2dOptions(6, 16, 5)), tnn::Sigmoid(),
                         tnn::AvgPool2d(tnn::AvgPool2dOptions(2).stride(2)), tnn::Flatten(),
                         tnn::Linear(16 * 5 * 5, 120), tnn::Sigmoid(), tnn::Linear(120, 84),
                         tnn::Sigmoid(), tnn::Linear(84, kClasses));
}

// Bytes the process holds on glibc's heap and in its mmapped blocks (where LibTorch's CPU
// allocator gets memory); LibTorch keeps no allocation statistics of its own on the CPU.
std::size_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

void run_epochs(benchmark::State& state, tnn::Sequential net, bool images) {
  const int threads = static_cast<int>(state.range(0));
  const int before = torch::get_num_threads();
  torch::set_num_threads(threads);
  torch::manual_seed(0);
  const torch::Tensor x = images ? torch::rand({kTrainImages, 1, kImageSide, kImageSide})
                                 : torch::rand({kTrainImages, kPixels});
  const torch::Tensor y = torch::randint(kClasses, {kTrainImages}, torch::kLong);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(kTrainLr));
  std::size_t peak = 0;
  for (auto _ : state) {
    const std::size_t resident = heap_in_use();
    std::size_t high = resident;
    torch::Tensor loss_sum = torch::zeros({});
    for (std::int64_t start = 0; start < kTrainImages; start += kTrainBatch) {
      const std::int64_t len = std::min(kTrainBatch, kTrainImages - start);
      opt.zero_grad();
      torch::Tensor loss = torch::nn::functional::cross_entropy(
          net->forward(x.narrow(0, start, len)), y.narrow(0, start, len));
      high = std::max(high, heap_in_use());  // activations held for the backward pass
      loss.backward();
      high = std::max(high, heap_in_use());  // gradients
      opt.step();
      loss_sum += loss.detach();
    }
    benchmark::DoNotOptimize(loss_sum.item<double>());
    peak = high - resident;
  }
  set_epoch_counters(state);
  // Sampled after each forward and each backward: a lower bound on the step's true peak.
  state.counters["step_peak_MiB"] = static_cast<double>(peak) / (1 << 20);
  state.counters["threads"] = threads;
  torch::set_num_threads(before);
}

void bm_mlp_epoch_libtorch(benchmark::State& state) { run_epochs(state, make_mlp(), false); }
void bm_lenet_epoch_libtorch(benchmark::State& state) { run_epochs(state, make_lenet(), true); }

void thread_settings(benchmark::internal::Benchmark* b) {
  epoch_settings(b);
  b->ArgName("threads")->Arg(1);
  if (cores() > 1) b->Arg(cores());
}

BENCHMARK(bm_mlp_epoch_libtorch)->Name("train_mlp/libtorch")->Apply(thread_settings);
BENCHMARK(bm_lenet_epoch_libtorch)->Name("train_lenet/libtorch")->Apply(thread_settings);

}  // namespace
}  // namespace tessera::bench
