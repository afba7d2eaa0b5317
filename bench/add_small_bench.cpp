// Per-op overhead: `a + b` on 2x3 float32 tensors, where the arithmetic is free and the
// time is dispatch, checks, allocation and the result's handle.
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "common.h"
#include "tessera/tessera.h"

namespace tessera::bench {
namespace {

void bm_add_small_tessera(benchmark::State& state) {
  manual_seed(0);
  const Tensor a = rand({2, 3});
  const Tensor b = rand({2, 3});
  benchmark::DoNotOptimize(a + b);  // warm-up
  for (auto _ : state) {
    Tensor c = a + b;
    benchmark::DoNotOptimize(c);
  }
  synchronize(a.device());  // the plain CPU runs ops inline; this only guards other setups
}

// The same op queued on a logical CPU device's work queue (the last of
// TESSERA_CPU_DEVICES=2 or more), as a GPU's ops go to its stream: a steady stream of ops
// costs what the host spends queueing one or the queue's thread spends running one,
// whichever is more (Note [Queueing allocates nothing] in backend/cpu/work_queue.cpp).
void bm_add_small_tessera_queued(benchmark::State& state) {
  if (num_cpu_devices() < 2) {
    state.SkipWithError("needs logical CPU devices: run with TESSERA_CPU_DEVICES=2");
    return;
  }
  const Device device = cpu(num_cpu_devices() - 1);
  manual_seed(0);
  const Tensor a = rand({2, 3}).to(device);
  const Tensor b = rand({2, 3}).to(device);
  benchmark::DoNotOptimize(a + b);  // warm-up
  synchronize(device);
  for (auto _ : state) {
    Tensor c = a + b;
    benchmark::DoNotOptimize(c);
  }
  synchronize(device);
}

BENCHMARK(bm_add_small_tessera)
    ->Name("add_small/tessera")
    ->Apply(wall_time<benchmark::kNanosecond>);
// Listed only in runs with logical CPU devices (the environment is read before tessera is).
[[maybe_unused]] const bool queued_row_listed = [] {
  const char* devices = std::getenv("TESSERA_CPU_DEVICES");
  if (devices == nullptr || std::atoi(devices) < 2) return false;
  benchmark::RegisterBenchmark("add_small/tessera_queued", bm_add_small_tessera_queued)
      ->Apply(wall_time<benchmark::kNanosecond>);
  return true;
}();

}  // namespace
}  // namespace tessera::bench
