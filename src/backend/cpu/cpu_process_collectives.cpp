// Collectives across processes for CPU tensors: the MPI transport, run on the device's
// default stream like a kernel (on the caller's thread for the plain CPU). Device i's
// collectives use MPI lane i, so each queue keeps its own order across ranks (Note [MPI
// communicators]).
#include "backend/cpu/cpu_backend.h"
#include "core/check.h"
#include "core/tensor_impl.h"
#include "distributed/mpi.h"

namespace tessera::detail {

void CpuBackendBase::process_collective(const ProcessCollectiveCall& call) {
  const int lane = call.input.device().index();
  // The call holds the tensors, so their storage lives until the transport is done.
  const auto kernel = [call, lane] {
    const Dtype dtype = call.input.dtype();
    const std::int64_t n = call.input.numel();
    void* in = impl_of(call.input).data();
    void* out = impl_of(call.output).data();
    switch (call.kind) {
      case CollectiveKind::kAllReduce:
        distributed::mpi_all_reduce(in, out, n, dtype, call.mean, lane);
        break;
      case CollectiveKind::kBroadcast:
        distributed::mpi_broadcast(out, n, dtype, call.root, lane);
        break;
      case CollectiveKind::kAllGather:
        distributed::mpi_all_gather(in, out, n, dtype, lane);
        break;
      case CollectiveKind::kReduceScatter:
        TESSERA_INTERNAL_ASSERT(false, "no reduce_scatter across processes");
    }
  };
  // Under a StreamGuard on a side stream the collective still goes to the default stream,
  // as in a nested StreamGuard(default_stream): ordered after the side stream's work, and the
  // side stream's later work after it. One thread per lane then calls MPI, as the lane's
  // order across ranks and the thread level MPI was joined at (Note [MPI communicators])
  // need; a side stream's own thread would race the default stream's collectives.
  const int stream = current_stream(lane);
  if (stream == 0 || capturing(lane)) {
    launch(lane, kernel);
    return;
  }
  enter_stream(lane, 0, stream);
  try {
    launch(lane, kernel);
  } catch (...) {
    leave_stream(lane, 0, stream);
    throw;
  }
  leave_stream(lane, 0, stream);
}

}  // namespace tessera::detail
