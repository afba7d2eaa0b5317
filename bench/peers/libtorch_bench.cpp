// The LibTorch peer: the same three benchmarks through torch::Tensor, so each tessera row
// has a peer measured in the same process and run. Built only when CMake finds LibTorch.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <omp.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "common.h"

namespace tessera::bench {

std::string configure_peer_threads() {
  // See Note [Threads] in main.cpp. Inter-op threads must be set before any parallel work.
  // torch::set_num_threads calls omp_set_num_threads, resizing tessera's pool too, so an
  // explicit OMP_NUM_THREADS wins over "every core".
  torch::set_num_interop_threads(1);
  torch::set_num_threads(std::getenv("OMP_NUM_THREADS") ? omp_get_max_threads() : cores());
  return "LibTorch " TORCH_VERSION ": intra-op threads " +
         std::to_string(torch::get_num_threads()) + ", inter-op threads " +
         std::to_string(at::get_num_interop_threads()) +
#if AT_PARALLEL_OPENMP
         ", intra-op backend OpenMP (libgomp, shared with tessera)";
#else
         ", intra-op backend native thread pool";
#endif
}

namespace {

void bm_matmul_libtorch(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  torch::manual_seed(0);
  const torch::Tensor a = torch::rand({n, n});
  const torch::Tensor b = torch::rand({n, n});
  benchmark::DoNotOptimize(torch::matmul(a, b));  // warm-up, as for every row
  for (auto _ : state) {
    torch::Tensor c = torch::matmul(a, b);
    benchmark::DoNotOptimize(c);
  }
  set_matmul_counters(state, n);
}

void bm_add_small_libtorch(benchmark::State& state) {
  torch::manual_seed(0);
  const torch::Tensor a = torch::rand({2, 3});
  const torch::Tensor b = torch::rand({2, 3});
  benchmark::DoNotOptimize(a + b);
  for (auto _ : state) {
    torch::Tensor c = a + b;
    benchmark::DoNotOptimize(c);
  }
}

// Same, under c10::InferenceMode: LibTorch's fastest documented setting for pure inference.
void bm_add_small_libtorch_inference(benchmark::State& state) {
  c10::InferenceMode guard;
  torch::manual_seed(0);
  const torch::Tensor a = torch::rand({2, 3});
  const torch::Tensor b = torch::rand({2, 3});
  benchmark::DoNotOptimize(a + b);
  for (auto _ : state) {
    torch::Tensor c = a + b;
    benchmark::DoNotOptimize(c);
  }
}

void bm_add_large_libtorch(benchmark::State& state) {
  torch::manual_seed(0);
  const torch::Tensor a = torch::rand({kLargeAddElements});
  const torch::Tensor b = torch::rand({kLargeAddElements});
  benchmark::DoNotOptimize(a + b);
  for (auto _ : state) {
    torch::Tensor c = a + b;
    benchmark::DoNotOptimize(c);
  }
  set_bandwidth_counter(state, kLargeAddBytes);
}

BENCHMARK(bm_matmul_libtorch)->Name("matmul_f32/libtorch")->Apply(matmul_sizes);
BENCHMARK(bm_add_small_libtorch)
    ->Name("add_small/libtorch")
    ->Apply(wall_time<benchmark::kNanosecond>);
BENCHMARK(bm_add_small_libtorch_inference)
    ->Name("add_small/libtorch_inference_mode")
    ->Apply(wall_time<benchmark::kNanosecond>);
BENCHMARK(bm_add_large_libtorch)
    ->Name("add_16M/libtorch")
    ->Apply(wall_time<benchmark::kMicrosecond>);

}  // namespace
}  // namespace tessera::bench
