// all_reduce (sum) across every logical CPU device (TESSERA_CPU_DEVICES=2 or more) of
// float32, bfloat16 and float16 tensors with as many elements: what the half types save
// (half the bytes; their sums convert through float32, Note [Half collectives]).
//   TESSERA_CPU_DEVICES=2 build/bench/tessera_bench --benchmark_filter=all_reduce
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "common.h"
#include "tessera/tessera.h"

namespace tessera::bench {
namespace {

// state.range(0): the dtype (0 float32, 1 bfloat16, 2 float16); range(1): elements in Mi.
void bm_all_reduce_devices(benchmark::State& state) {
  std::vector<Device> devices;
  for (const Device& d : available_devices()) {
    if (d.is_cpu() && d.index() >= 0) devices.push_back(d);
  }
  if (devices.size() < 2) {
    state.SkipWithError("needs two logical CPU devices: TESSERA_CPU_DEVICES=2");
    return;
  }
  const Dtype dtypes[] = {kFloat32, kBFloat16, kFloat16};
  const Dtype dtype = dtypes[state.range(0)];
  const std::int64_t n = state.range(1) << 20;
  std::vector<Tensor> t;  // zeros stay zeros: no overflow over the runs
  for (const Device& d : devices) t.push_back(zeros({n}, {dtype, d}));
  const auto wait = [&] {
    for (const Device& d : devices) synchronize(d);
  };
  all_reduce(t);  // warm-up
  wait();
  for (auto _ : state) {
    all_reduce(t);
    wait();
  }
  state.SetLabel(std::string(dtype_name(dtype)));
  state.SetBytesProcessed(state.iterations() * n * static_cast<std::int64_t>(itemsize(dtype)));
}

BENCHMARK(bm_all_reduce_devices)
    ->Name("all_reduce_logical_devices/tessera")
    ->ArgsProduct({{0, 1, 2}, {1, 4, 16}})
    ->Apply(wall_time<benchmark::kMicrosecond>);

}  // namespace
}  // namespace tessera::bench
