// CudaBackend::collective: one NCCL call per device inside one NCCL group, each on the
// device's current stream. Nothing here waits. See Note [NCCL at run time].
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/nccl_library.h"
#include "core/check.h"
#include "core/tensor_impl.h"
#include "tessera/graph.h"

// Note [NCCL at run time]
// GPU collectives go through NCCL, which tessera opens with dlopen at the first collective
// and never links (nccl_library.cpp): the toolkit's libnccl is ~200 MB, too big to ship,
// and a GPU machine with PyTorch already has one (scripts/gpu-check points
// TESSERA_NCCL_LIBRARY at it). The outcome of loading is cached for the process; when it
// failed, every collective throws the same DeviceError saying what was tried and how to get
// NCCL, and the rest of the GPU backend works as before. Nothing touches NCCL before the
// first collective, so a process that has no GPU or never groups GPUs never loads it.
//
// A group is an ordered list of devices (one device is a group too). Its first collective
// makes one communicator per device with ncclCommInitAll, rank i on the list's device i, and
// caches them (so a group's first collective must not be inside a graph capture: making
// communicators allocates and synchronizes; it is refused there). A collective over several
// GPUs is refused while one of them captures: a CUDA graph holds the work of one GPU, and
// the partners' kernels would wait for the recorded one forever. A collective is one NCCL
// group: one NCCL call
// (ncclAllReduce, ncclBroadcast, ...) per device, on the stream this thread currently uses for that
// device (activate), so it runs after the work already queued there and before work queued later,
// like any kernel, and the host never waits. That stream order is also how its tensors stay alive,
// as for every kernel here: a block freed on the host is reused only by work queued later on the
// same stream (Note [CUDA streams and memory]; side streams through streams_in_use), and
// NCCL is done with a device's buffers before that device's stream moves past the
// collective.
//
// mean: floating tensors use ncclAvg (NCCL >= 2.10) in the same pass (NCCL scales each
// input by 1/n before summing, so the last bits may differ from sum / n; a group of one is
// exact); integers, and floats with an older NCCL, are summed and then divided by the group
// size with the elementwise kernel, so an integer mean rounds like the CPU backend's
// division whatever NCCL is loaded.
//
// Communicators are never destroyed, and the library never closed. The backend itself
// lives until the process ends (cuda_backend_impl), and there is no later moment: a static
// destructor calling ncclCommDestroy would run after the CUDA runtime may have torn down its
// contexts, where NCCL can crash or hang. The driver reclaims everything at exit.

namespace tessera::detail {
namespace {

using cuda::DeviceRestore;
using cuda::NcclLibrary;

// The communicators of one ordered device list: comms[i] is rank i, on the list's device i.
struct Clique {
  std::vector<ncclComm_t> comms;
  std::mutex launch;  // a communicator is not thread-safe: one thread enqueues at a time
};

struct Cliques {
  std::mutex mutex;
  std::map<std::vector<int>, std::unique_ptr<Clique>> by_devices;
};

Cliques& cliques() {
  static Cliques* const all = new Cliques();  // never destroyed: Note [NCCL at run time]
  return *all;
}

// `capturing`: a device of the group that is capturing a graph, or -1; `op` names the
// collective for the error.
Clique& clique_for(const NcclLibrary& nccl, const std::vector<int>& devices, const char* op,
                   int capturing) {
  Cliques& all = cliques();
  std::lock_guard lock(all.mutex);
  std::unique_ptr<Clique>& slot = all.by_devices[devices];
  if (slot == nullptr) {
    if (capturing >= 0) {
      throw GraphCaptureError(fmt::format(
          "[{}] cuda:{} is capturing a graph, and this is the first collective on this group "
          "of GPUs, which makes its NCCL communicator; that cannot be recorded (it allocates "
          "and synchronizes). Run one collective on the group before Graph::capture (a "
          "warm-up step), then capture",
          op, capturing));
    }
    auto clique = std::make_unique<Clique>();
    clique->comms.resize(devices.size());
    DeviceRestore restore;
    TESSERA_NCCL_CHECK(
        nccl.comm_init_all(clique->comms.data(), static_cast<int>(devices.size()), devices.data()));
    slot = std::move(clique);
  }
  return *slot;
}

bool reduces(CollectiveKind kind) {
  return kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter;
}

void check_summable(Dtype dtype, CollectiveKind kind) {
  // Bytes of 0 and 1 copy exactly, but their sum is not a bool.
  TESSERA_CHECK(dtype != kBool || !reduces(kind), DtypeError,
                "[{}] cannot sum bool tensors across devices: the sum of bools is not a bool. "
                "Convert them first (.to(kInt32)), or use broadcast or all_gather",
                collective_name(kind));
}

// A communicator with an asynchronous error hangs in its next collective: say so instead.
void check_async_errors(const NcclLibrary& nccl, const Clique& clique) {
  if (nccl.comm_get_async_error == nullptr) return;
  for (ncclComm_t comm : clique.comms) {
    ncclResult_t earlier = ncclSuccess;
    TESSERA_NCCL_CHECK(nccl.comm_get_async_error(comm, &earlier));
    if (earlier != ncclSuccess) {
      cuda::throw_nccl_error(earlier, "an earlier collective of this group (ncclCommGetAsyncError)",
                             __FILE__, __LINE__);
    }
  }
}

// Rank i's call; counts are elements: all_gather's is what rank i sends, reduce_scatter's
// what it receives (nccl.h).
void enqueue(const NcclLibrary& nccl, const CollectiveCall& call, std::size_t i,
             ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const void* in = impl_of(call.inputs[i]).data();
  void* out = impl_of(call.outputs[i]).data();
  const auto in_count = static_cast<std::size_t>(call.inputs[i].numel());
  const auto out_count = static_cast<std::size_t>(call.outputs[i].numel());
  switch (call.kind) {
    case CollectiveKind::kAllReduce:
      TESSERA_NCCL_CHECK(nccl.all_reduce(in, out, in_count, type, op, comm, stream));
      break;
    case CollectiveKind::kBroadcast:
      TESSERA_NCCL_CHECK(nccl.broadcast(in, out, in_count, type, call.root, comm, stream));
      break;
    case CollectiveKind::kAllGather:
      TESSERA_NCCL_CHECK(nccl.all_gather(in, out, in_count, type, comm, stream));
      break;
    case CollectiveKind::kReduceScatter:
      TESSERA_NCCL_CHECK(nccl.reduce_scatter(in, out, out_count, type, op, comm, stream));
      break;
  }
}

}  // namespace

void CudaBackend::collective(const CollectiveCall& call) {
  const std::size_t n = call.inputs.size();
  TESSERA_INTERNAL_ASSERT(n > 0 && call.outputs.size() == n,
                          "{} inputs and {} outputs for a collective", n, call.outputs.size());
  const Dtype dtype = call.inputs.front().dtype();
  check_summable(dtype, call.kind);
  // Same shapes on every device (the front end checked): empty inputs mean empty outputs.
  if (call.inputs.front().numel() == 0) return;
  std::vector<int> devices(n);
  int capturing_device = -1;  // Note [NCCL at run time]
  for (std::size_t i = 0; i < n; ++i) {
    devices[i] = call.inputs[i].device().index();
    if (capturing_device < 0 && capturing(devices[i])) capturing_device = devices[i];
  }
  if (n > 1 && capturing_device >= 0) {
    std::string group;
    for (int d : devices) group += fmt::format("{}cuda:{}", group.empty() ? "" : ", ", d);
    throw GraphCaptureError(fmt::format(
        "[{}] cuda:{} is capturing a graph, and a collective over several GPUs ({}) cannot be "
        "recorded: a CUDA graph holds the work of one GPU, so the others would wait for it "
        "forever. Run the collective before Graph::capture or after it (outside the captured "
        "code)",
        collective_name(call.kind), capturing_device, group));
  }
  const NcclLibrary& nccl = cuda::nccl_library();
  const ncclDataType_t type = cuda::nccl_data_type(dtype, nccl, collective_name(call.kind));

  std::vector<cudaStream_t> streams(n);
  for (std::size_t i = 0; i < n; ++i) {
    streams[i] = activate(devices[i]);  // also applies pending side-stream joins
  }
  Clique& clique = clique_for(nccl, devices, collective_name(call.kind), capturing_device);
  const bool mean = call.mean && reduces(call.kind);
  const bool avg = mean && is_floating(dtype) && nccl.has_avg();  // Note [NCCL at run time]
  const ncclRedOp_t op = avg ? ncclAvg : ncclSum;
  {
    // One group on several GPUs, queued as one step (hold_cross_device_submissions).
    const auto in_order = n > 1 ? hold_cross_device_submissions() : std::unique_lock<std::mutex>();
    std::lock_guard lock(clique.launch);
    check_async_errors(nccl, clique);
    DeviceRestore restore;
    TESSERA_NCCL_CHECK(nccl.group_start());
    try {
      for (std::size_t i = 0; i < n; ++i) {
        enqueue(nccl, call, i, type, op, clique.comms[i], streams[i]);
      }
    } catch (...) {
      // Close the group (its result no longer matters) so this thread's later NCCL calls
      // do not land inside it.
      (void)nccl.group_end();
      throw;
    }
    TESSERA_NCCL_CHECK(nccl.group_end());
  }
  for (int to : devices) {  // every output holds every input's values
    for (int from : devices) {
      if (from != to) note_data_from(to, from);  // Note [Faults follow the data]
    }
  }
  if (mean && !avg) {
    // Division, not a multiplication by 1/n: that scalar would truncate to 0 for integers.
    for (const Tensor& out : call.outputs) {
      binary_scalar(BinaryOp::kDiv, out, static_cast<double>(n), false, out);
    }
  }
}

}  // namespace tessera::detail
