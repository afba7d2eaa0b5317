// CudaBackend::process_collective: a collective across processes over NCCL, one process per
// GPU, on the device's current stream; nothing here waits for the GPU. See Note [NCCL across
// processes]. Compiled in every CUDA build; it has never run on a GPU.
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/nccl_library.h"
#include "core/check.h"
#include "core/tensor_impl.h"
#include "distributed/mpi.h"
#include "tessera/graph.h"

// Note [NCCL across processes]
// A process group's first collective on a GPU makes this process's communicator for that
// device, as NCCL's docs do it: rank 0 calls ncclGetUniqueId, MPI broadcasts the id (with
// whether rank 0 got one, so a failure there is an error on every rank, not a hang), and
// every rank joins with ncclCommInitRank on that device. Before that the ranks exchange
// whether each loaded NCCL and whether its device is capturing a graph (which cannot record
// the communicator's making: it allocates and waits for the other ranks); when any rank
// cannot go on, every rank throws, since one that went on would wait for the others forever.
// Communicators live for the process (Note [NCCL at run time]). A collective is one NCCL call
// (ncclAllReduce, ncclBroadcast, ...) on the stream this thread uses for the device, like any
// kernel; mean uses ncclAvg where NCCL has it, else sum then divide.

namespace tessera::detail {
namespace {

using cuda::DeviceRestore;
using cuda::NcclLibrary;

struct ProcessComm {
  ncclComm_t comm = nullptr;
  std::mutex launch;  // a communicator is not thread-safe
};

// What rank 0 broadcasts: its id, or why it has none.
struct IdMessage {
  int ok = 0;
  ncclUniqueId id{};
  char error[256] = {};
};

// What each rank says before the communicator is made, so that every rank stops with the
// same error instead of waiting for a rank that stopped alone.
enum RankState : std::int64_t { kReady = 0, kCapturing = 1, kNoNccl = 2 };

// `nccl`: this process's library, or nullptr with `no_nccl` saying why it could not be
// loaded; `capturing`: whether `device` is capturing a graph.
ProcessComm& comm_for(const NcclLibrary* nccl, const std::string& no_nccl, int device, int rank,
                      int size, bool capturing) {
  static std::mutex mutex;
  static auto* comms = new std::map<int, ProcessComm>();  // never destroyed: see the Note
  std::lock_guard lock(mutex);
  ProcessComm& pc = (*comms)[device];
  if (pc.comm != nullptr) return pc;
  const RankState mine = nccl == nullptr ? kNoNccl : capturing ? kCapturing : kReady;
  const std::vector<std::int64_t> states = distributed::mpi_exchange({mine});
  for (int r = 0; r < static_cast<int>(states.size()); ++r) {
    TESSERA_CHECK(states[r] != kNoNccl, DeviceError,
                  "[ProcessGroup] rank {} could not load NCCL for the process group's first "
                  "collective on its GPU, so no rank can make the communicator{}",
                  r, r == rank ? ": " + no_nccl : " (that rank's error says why)");
    TESSERA_CHECK(states[r] != kCapturing, GraphCaptureError,
                  "[ProcessGroup] rank {} is capturing a graph on its GPU, and the process "
                  "group's first collective on cuda:{} (rank {}) makes its NCCL communicator, "
                  "which cannot be recorded (it allocates and waits for the other ranks). Run "
                  "one collective before Graph::capture (a warm-up step), then capture",
                  r, device, rank);
  }
  IdMessage message;
  if (rank == 0) {
    try {
      TESSERA_NCCL_CHECK(nccl->get_unique_id(&message.id));
      message.ok = 1;
    } catch (const Error& e) {
      std::strncpy(message.error, e.what(), sizeof message.error - 1);
    }
  }
  distributed::mpi_broadcast_bytes(&message, sizeof message, 0);
  TESSERA_CHECK(message.ok == 1, Error, "[ProcessGroup] rank 0 could not make NCCL's id: {}",
                message.error);
  DeviceRestore restore;
  TESSERA_CUDA_CHECK(cudaSetDevice(device));
  TESSERA_NCCL_CHECK(nccl->comm_init_rank(&pc.comm, size, message.id, rank));
  return pc;
}

}  // namespace

void CudaBackend::process_collective(const ProcessCollectiveCall& call) {
  if (call.input.numel() == 0) return;
  // A rank whose NCCL does not load still takes part in comm_for's exchange, so the others
  // stop with an error too rather than wait for it.
  const NcclLibrary* loaded = nullptr;
  std::string no_nccl;
  try {
    loaded = &cuda::nccl_library();
  } catch (const DeviceError& e) {
    no_nccl = e.what();
  }
  const int device = call.input.device().index();
  cudaStream_t stream = activate(device);
  ProcessComm& pc = comm_for(loaded, no_nccl, device, call.rank, call.size, capturing(device));
  const NcclLibrary& nccl = *loaded;
  const ncclDataType_t type =
      cuda::nccl_data_type(call.input.dtype(), nccl,
                           fmt::format("ProcessGroup::{}", collective_name(call.kind)).c_str());
  const bool avg = call.mean && is_floating(call.input.dtype()) && nccl.has_avg();
  const void* in = impl_of(call.input).data();
  void* out = impl_of(call.output).data();
  const auto count = static_cast<std::size_t>(call.input.numel());
  {
    std::lock_guard lock(pc.launch);
    DeviceRestore restore;
    switch (call.kind) {
      case CollectiveKind::kAllReduce:
        TESSERA_NCCL_CHECK(
            nccl.all_reduce(in, out, count, type, avg ? ncclAvg : ncclSum, pc.comm, stream));
        break;
      case CollectiveKind::kBroadcast:
        TESSERA_NCCL_CHECK(nccl.broadcast(in, out, count, type, call.root, pc.comm, stream));
        break;
      case CollectiveKind::kAllGather:
        TESSERA_NCCL_CHECK(nccl.all_gather(in, out, count, type, pc.comm, stream));
        break;
      case CollectiveKind::kReduceScatter:
        TESSERA_INTERNAL_ASSERT(false, "no reduce_scatter across processes");
    }
  }
  if (call.mean && !avg) {
    binary_scalar(BinaryOp::kDiv, call.output, static_cast<double>(call.size), false, call.output);
  }
}

}  // namespace tessera::detail
