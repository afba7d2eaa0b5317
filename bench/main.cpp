// tessera_bench's entry point: fixes the thread settings, records them in the JSON
// context, then runs every registered benchmark.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdlib>
#include <string>

#include "common.h"

int main(int argc, char** argv) {
  namespace tb = tessera::bench;
  // Note [Threads]: tessera's kernels, OpenBLAS (OpenMP build) and oneDNN all run on
  // libgomp's one pool, sized by OMP_NUM_THREADS (default: every core). Debian's LibTorch
  // 1.13 is built with AT_PARALLEL_OPENMP, so its intra-op work uses that same pool;
  // configure_peer_threads() gives it every core (or OMP_NUM_THREADS when set) and one
  // inter-op thread, its best setting for single-op benchmarks. Nothing else is tuned
  // (no OPENBLAS_CORETYPE, no pinning): we bench what a user gets.
  const std::string peer = tb::configure_peer_threads();
  const char* omp_env = std::getenv("OMP_NUM_THREADS");
  benchmark::AddCustomContext("cores", std::to_string(tb::cores()));
  benchmark::AddCustomContext("peak_gflops", std::to_string(tb::peak_gflops()));
  benchmark::AddCustomContext("omp_max_threads", std::to_string(omp_get_max_threads()));
  benchmark::AddCustomContext("OMP_NUM_THREADS", omp_env ? omp_env : "(unset)");
  benchmark::AddCustomContext("peer", peer);

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
