// Side streams on a GPU: which stream this thread queues on, and the events that order the
// side streams with the default stream.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"

// Note [CUDA streams]
// Each GPU has a default stream and kExtraStreams side streams. A thread queues on the
// default stream unless a StreamGuard is open for that GPU (t_stream below). Entering a side
// stream makes it wait for an event recorded on the default stream, so everything queued
// before is visible to it. Leaving records an event on the side stream that the default
// stream waits on before the next work queued there (apply_joins, from activate), not at
// once: otherwise a second guard on another side stream, entered right after, would wait
// for the first one through the default stream and the two would not overlap. Until those
// joins are applied and no guard is open, a freed block may still be in use on any stream,
// so the allocator holds it until an event on each stream has fired (streams_in_use).

namespace tessera::detail {
namespace {

// This thread's stream per GPU (0 = default).
thread_local std::array<std::int8_t, kMaxDevicesPerKind> t_stream{};

}  // namespace

void wait_for(cudaStream_t waiter, cudaStream_t signaller) {
  cudaEvent_t event;
  TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  TESSERA_CUDA_CHECK(cudaEventRecord(event, signaller));
  TESSERA_CUDA_CHECK(cudaStreamWaitEvent(waiter, event, 0));
  TESSERA_CUDA_CHECK(cudaEventDestroy(event));  // released once it has fired
}

cudaStream_t CudaBackend::activate(int index) {
  thread_local int current = -1;
  PerDevice& d = device(index);
  if (current != index) {
    TESSERA_CUDA_CHECK(cudaSetDevice(index));
    current = index;
  }
  const int id = t_stream[index];
  if (id == 0 && d.has_pending_joins.load(std::memory_order_acquire)) [[unlikely]] {
    apply_joins(d);
  }
  return d.streams[id].stream;
}

void CudaBackend::apply_joins(PerDevice& d) {
  std::lock_guard lock(d.side_mutex);
  for (cudaEvent_t e : d.pending_joins) {
    TESSERA_CUDA_CHECK(cudaStreamWaitEvent(d.streams[0].stream, e, 0));
    TESSERA_CUDA_CHECK(cudaEventDestroy(e));
  }
  d.pending_joins.clear();
  d.has_pending_joins.store(false, std::memory_order_release);
}

std::span<const cudaStream_t> CudaBackend::streams_in_use(PerDevice& d,
                                                          cudaStream_t (&buf)[1 + kExtraStreams]) {
  if (d.open_guards.load(std::memory_order_acquire) == 0 &&
      !d.has_pending_joins.load(std::memory_order_acquire)) {
    return {};
  }
  for (int i = 0; i <= kExtraStreams; ++i) buf[i] = d.streams[i].stream;
  return {buf, static_cast<std::size_t>(1 + kExtraStreams)};
}

void CudaBackend::enter_stream(int index, int id, int previous) {
  const cudaStream_t from = activate(index);  // `previous`'s stream (joins applied if default)
  PerDevice& d = devices_[index];
  if (id != 0) d.open_guards.fetch_add(1, std::memory_order_acq_rel);
  if (id != previous) wait_for(d.streams[id].stream, from);
  t_stream[index] = static_cast<std::int8_t>(id);
}

void CudaBackend::leave_stream(int index, int id, int previous) {
  PerDevice& d = devices_[index];
  activate(index);
  t_stream[index] = static_cast<std::int8_t>(previous);
  if (id != 0) {
    cudaEvent_t event;
    TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    TESSERA_CUDA_CHECK(cudaEventRecord(event, d.streams[id].stream));
    {
      std::lock_guard lock(d.side_mutex);
      d.pending_joins.push_back(event);
      d.has_pending_joins.store(true, std::memory_order_release);
    }
    d.open_guards.fetch_sub(1, std::memory_order_acq_rel);
  }
  // Back on a side stream (nested guards): it must see the work of the one we leave.
  if (previous != 0 && previous != id) {
    wait_for(d.streams[previous].stream, d.streams[id].stream);
  }
}

int CudaBackend::current_stream(int index) const { return t_stream[index]; }

void CudaBackend::synchronize_stream(int index, int id) {
  activate(index);
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(devices_[index].streams[id].stream));
}

}  // namespace tessera::detail
