// All-reduce (sum) of 1 MB to 64 MB float32 buffers across the ranks: tessera's process group
// against MPI_Allreduce called directly on the same buffer, interleaved in one run so both
// see the same machine. Prints a Markdown table of medians (docs/benchmarks.md).
//   mpirun -np 2 build/bench/mpi/tessera_mpi_bench [reps=7]
// With TESSERA_CPU_DEVICES=2 (mpirun -x) the tensor lives on cpu:0 and tessera's all-reduce
// runs on its queue; the timing then includes the wait for that queue.
//   mpirun -np 2 build/bench/mpi/tessera_mpi_bench [reps] bf16|f16
// sums a bfloat16 (float16) tensor instead (2 bytes an element, Note [Half collectives]) against
// MPI_Allreduce of float32 with as many elements: what summing bfloat16 values costs
// without half collectives (their float32 copies). Times per call, not bandwidth.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "tessera/tessera.h"
#include "timing.h"

namespace {

using tessera::bench::summarize;
using tessera::bench::time_calls;

// Seconds per call of `fn`, the slowest rank's, over `iters` calls started together (Note
// [Timing] in bench/timing.h: one repetition, no warm-up; fn waits for what it queues).
template <typename F>
double time_per_call(int iters, F&& fn) {
  MPI_Barrier(MPI_COMM_WORLD);
  double s = time_calls(0, 1, iters, fn, [] {}).median;
  MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return s;
}

double median(std::vector<double> v) { return summarize(std::move(v), 1).median; }

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera;
  const int reps = argc > 1 ? std::atoi(argv[1]) : 7;
  const std::string kind = argc > 2 ? argv[2] : "";
  const bool half = kind == "bf16" || kind == "f16";
  const Dtype half_dtype = kind == "f16" ? kFloat16 : kBFloat16;
  const ProcessGroup& pg = ProcessGroup::init();
  const Device device = available_devices().front();  // cpu, or cpu:0
  if (pg.rank() == 0) {
    std::printf("all-reduce (sum) of %s%s between %d ranks on %s, median of %d runs\n\n",
                half ? dtype_name(half_dtype).data() : "float32",
                half ? " (MPI: float32 of as many elements)" : "", pg.size(), device.str().c_str(),
                reps);
    if (half) {
      std::printf(
          "| float32 size | elements | tessera %s (ms) | MPI_Allreduce float32 (ms) "
          "| time ratio |\n|---:|---:|---:|---:|---:|\n",
          dtype_name(half_dtype).data());
    } else {
      std::printf("| size | tessera GB/s | MPI_Allreduce GB/s | ratio |\n|---:|---:|---:|---:|\n");
    }
  }
  for (std::int64_t mb : {1, 2, 4, 8, 16, 32, 64}) {
    const std::int64_t n = mb * (1 << 20) / 4;
    // Zeros stay zeros: no overflow over the runs.
    Tensor x = zeros({n}, {half ? half_dtype : kFloat32, device});
    Tensor staged = half ? zeros({n}, {kFloat32, device}) : x;
    float* data = staged.data<float>();
    const int iters = static_cast<int>(std::max<std::int64_t>(4, 256 / mb));
    const auto with_tessera = [&] {
      pg.all_reduce(x);
      synchronize(device);
    };
    const auto with_mpi = [&] {
      MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    };
    time_per_call(2, with_tessera);  // warm-up: pages, MPI's buffers
    time_per_call(2, with_mpi);
    std::vector<double> ours, theirs;
    for (int r = 0; r < reps; ++r) {
      ours.push_back(time_per_call(iters, with_tessera));
      theirs.push_back(time_per_call(iters, with_mpi));
    }
    if (half) {
      if (pg.rank() == 0) {
        std::printf("| %lld MB | %lld | %.3f | %.3f | %.2f |\n", static_cast<long long>(mb),
                    static_cast<long long>(n), median(ours) * 1e3, median(theirs) * 1e3,
                    median(ours) / median(theirs));
      }
      continue;
    }
    // Algorithm bandwidth: the buffer's bytes over the time of one all-reduce.
    const double bytes = static_cast<double>(n) * 4;
    const double gbs_ours = bytes / median(ours) / 1e9, gbs_mpi = bytes / median(theirs) / 1e9;
    if (pg.rank() == 0) {
      std::printf("| %lld MB | %.2f | %.2f | %.2f |\n", static_cast<long long>(mb), gbs_ours,
                  gbs_mpi, gbs_ours / gbs_mpi);
    }
  }
  return 0;
}
