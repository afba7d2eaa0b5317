#pragma once
// Shared helpers for tessera's benchmarks: how a row is timed, the machine's peak, counters
// and size lists.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>

#include "timing.h"

namespace tessera::bench {

/// Every Google Benchmark row is timed this way (Note [Timing]): wall clock, results in Unit.
/// Register with ->Apply(wall_time<benchmark::kMicrosecond>).
template <benchmark::TimeUnit Unit>
void wall_time(benchmark::internal::Benchmark* b) {
  b->UseRealTime()->Unit(Unit);
}

/// float32 peak of one core assumed for the reference machine (2 FMA x 16 lanes x 2 flops
/// x ~3.47 GHz). Percent-of-peak figures divide by peak_gflops(). See docs/benchmarks.md
/// for why this may be twice what a Zen 4 core can issue.
inline constexpr double kPeakGflopsPerCore = 222.0;

/// Logical cores as the standard library sees them (never 0).
inline int cores() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

/// kPeakGflopsPerCore x cores(), unless TESSERA_BENCH_PEAK_GFLOPS_PER_CORE overrides the
/// per-core figure (for another machine).
inline double peak_gflops() {
  const char* env = std::getenv("TESSERA_BENCH_PEAK_GFLOPS_PER_CORE");
  const double per_core = env != nullptr ? std::atof(env) : 0.0;
  return (per_core > 0 ? per_core : kPeakGflopsPerCore) * cores();
}

/// Square float32 matmul sizes: a few BLAS-friendly powers of two plus an odd 100.
inline void matmul_sizes(benchmark::internal::Benchmark* b) {
  for (std::int64_t n : {64, 100, 256, 512, 1024, 2048, 4096}) b->Arg(n);
  wall_time<benchmark::kMicrosecond>(b);
}

/// GFLOPS and pct_peak counters for an n x n x n matmul (2 n^3 flops per iteration).
inline void set_matmul_counters(benchmark::State& state, std::int64_t n) {
  const double flops = 2.0 * static_cast<double>(n) * n * n * state.iterations();
  state.counters["GFLOPS"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
  state.counters["pct_peak"] =
      benchmark::Counter(flops / 1e9 * 100.0 / peak_gflops(), benchmark::Counter::kIsRate);
}

/// GBps counter for `bytes` moved per iteration (decimal gigabytes).
inline void set_bandwidth_counter(benchmark::State& state, double bytes) {
  state.counters["GBps"] =
      benchmark::Counter(bytes * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

/// Elements of the large elementwise benchmark: 16 Mi floats = 64 MiB per operand.
inline constexpr std::int64_t kLargeAddElements = std::int64_t{16} << 20;
/// Bytes an out-of-place add moves: read a, read b, write c.
inline constexpr double kLargeAddBytes = 3.0 * kLargeAddElements * sizeof(float);

/// Sets up the peer's threads (stub when LibTorch is absent, see no_libtorch.cpp) and
/// returns a line describing them for the benchmark context.
std::string configure_peer_threads();

}  // namespace tessera::bench
