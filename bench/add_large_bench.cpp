// Memory-bound elementwise add on 16 Mi float32 (64 MiB per operand): tessera against a
// STREAM-style OpenMP loop over preallocated arrays moving the same bytes.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>

#include "common.h"
#include "tessera/tessera.h"

namespace tessera::bench {
namespace {

void bm_add_large_tessera(benchmark::State& state) {
  manual_seed(0);
  const Tensor a = rand({kLargeAddElements});
  const Tensor b = rand({kLargeAddElements});
  benchmark::DoNotOptimize(a + b);  // warm-up
  for (auto _ : state) {
    Tensor c = a + b;  // allocates its 64 MiB output per call, as users do
    synchronize(c.device());
    benchmark::DoNotOptimize(c);
  }
  set_bandwidth_counter(state, kLargeAddBytes);
}

// STREAM's "add" kernel: the bandwidth ceiling for this op on this machine.
void bm_add_large_stream(benchmark::State& state) {
  const std::int64_t n = kLargeAddElements;
  // new[] without value-initialization, so the first touch is the parallel loop below and
  // pages land where the threads that use them run (as in STREAM).
  std::unique_ptr<float[]> a(new float[n]);
  std::unique_ptr<float[]> b(new float[n]);
  std::unique_ptr<float[]> c(new float[n]);
  float* pa = a.get();
  float* pb = b.get();
  float* pc = c.get();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    pa[i] = 1.0F;
    pb[i] = 2.0F;
    pc[i] = 0.0F;
  }
  for (auto _ : state) {
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) pc[i] = pa[i] + pb[i];
    benchmark::DoNotOptimize(pc);
    benchmark::ClobberMemory();
  }
  set_bandwidth_counter(state, kLargeAddBytes);
}

BENCHMARK(bm_add_large_tessera)->Name("add_16M/tessera")->Apply(wall_time<benchmark::kMicrosecond>);
BENCHMARK(bm_add_large_stream)->Name("add_16M/stream")->Apply(wall_time<benchmark::kMicrosecond>);

}  // namespace
}  // namespace tessera::bench
