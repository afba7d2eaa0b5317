// Per-op overhead: `a + b` on 2x3 float32 tensors, where the arithmetic is free and the
// time is dispatch, checks, allocation and the result's handle.
#include <benchmark/benchmark.h>

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

BENCHMARK(bm_add_small_tessera)
    ->Name("add_small/tessera")
    ->Apply(wall_time<benchmark::kNanosecond>);

}  // namespace
}  // namespace tessera::bench
