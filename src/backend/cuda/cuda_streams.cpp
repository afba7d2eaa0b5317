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
// joins are applied and no guard is open, a freed block may still be in use on the default
// stream or on a side stream with work not yet joined ("active"), so the allocator holds it
// until an event recorded on each of those has fired (streams_in_use). Events come from the
// GPU's pool (cuda_event_pool.h).

namespace tessera::detail {
namespace {

// This thread's stream per GPU (0 = default).
thread_local std::array<std::int8_t, kMaxDevicesPerKind> t_stream{};

}  // namespace

cudaStream_t CudaBackend::select(int index) {
  PerDevice& d = device(index);
  // Ask the runtime which GPU is current (a thread-local read) rather than remembering what
  // we set: the user, a library, or device()'s first-use setup may have changed it since.
  int current = -1;
  TESSERA_CUDA_CHECK(cudaGetDevice(&current));
  if (current != index) TESSERA_CUDA_CHECK(cudaSetDevice(index));
  return d.streams[t_stream[index]].stream;
}

cudaStream_t CudaBackend::activate(int index) {
  const cudaStream_t stream = select(index);
  PerDevice& d = devices_[index];
  // Not while the default stream records a graph: another thread's join (it left a
  // StreamGuard meanwhile) would be recorded into the graph instead of run, and the eager
  // stream would never wait for it. It stays pending for the first activate after the capture.
  if (t_stream[index] == 0 && d.has_pending_joins.load(std::memory_order_acquire) &&
      !d.capturing.load(std::memory_order_acquire)) [[unlikely]] {
    apply_joins(d);
  }
  return stream;
}

void CudaBackend::apply_joins(PerDevice& d) {
  std::lock_guard lock(d.side_mutex);
  for (const auto& [event, id] : d.pending_joins) {
    TESSERA_CUDA_CHECK(cudaStreamWaitEvent(d.streams[0].stream, event, 0));
    d.events.release(event);
    // Joined and not entered again: the default stream's order covers it from now on.
    if (--d.pending[id] == 0 && d.open[id] == 0) d.active.fetch_and(~(1u << id));
  }
  d.pending_joins.clear();
  d.has_pending_joins.store(false, std::memory_order_release);
}

std::span<const cudaStream_t> CudaBackend::streams_in_use(PerDevice& d,
                                                          cudaStream_t (&buf)[1 + kExtraStreams]) {
  const unsigned active = d.active.load(std::memory_order_acquire);
  if (active == 0) return {};
  std::size_t n = 0;
  buf[n++] = d.streams[0].stream;
  for (int i = 1; i <= kExtraStreams; ++i) {
    if (active & (1u << i)) buf[n++] = d.streams[i].stream;
  }
  return {buf, n};
}

void CudaBackend::enter_stream(int index, int id, int previous) {
  // `previous`'s stream, its pending joins left pending: a side stream entered right after
  // another one was left must not wait for it through the default stream.
  const cudaStream_t from = select(index);
  PerDevice& d = devices_[index];
  if (id != 0) {
    std::lock_guard lock(d.side_mutex);
    ++d.open[id];
    d.active.fetch_or(1u << id);
  }
  if (id != previous) wait_for(d.events, d.streams[id].stream, from);
  t_stream[index] = static_cast<std::int8_t>(id);
}

void CudaBackend::leave_stream(int index, int id, int previous) {
  PerDevice& d = devices_[index];
  activate(index);
  t_stream[index] = static_cast<std::int8_t>(previous);
  if (id != 0) {
    const cudaEvent_t event = d.events.acquire();
    TESSERA_CUDA_CHECK(cudaEventRecord(event, d.streams[id].stream));
    std::lock_guard lock(d.side_mutex);
    d.pending_joins.emplace_back(event, id);
    ++d.pending[id];
    --d.open[id];
    d.has_pending_joins.store(true, std::memory_order_release);
  }
  // Back on a side stream (nested guards): it must see the work of the one we leave.
  if (previous != 0 && previous != id) {
    wait_for(d.events, d.streams[previous].stream, d.streams[id].stream);
  }
}

int CudaBackend::current_stream(int index) const { return t_stream[index]; }

void CudaBackend::order_stream_after(int index, int waiter, int waited) {
  if (waiter == waited) return;
  PerDevice& d = devices_[index];
  select(index);  // the device current for the calls below
  const cudaStream_t to = d.streams[waiter].stream;
  if (waited == 0) {
    // The default stream's work includes the side streams it joined and has not waited for
    // yet (Note [CUDA streams]): their events, then its own.
    std::lock_guard lock(d.side_mutex);
    for (const auto& [event, id] : d.pending_joins) {
      if (id != waiter) TESSERA_CUDA_CHECK(cudaStreamWaitEvent(to, event, 0));
    }
  }
  wait_for(d.events, to, d.streams[waited].stream);
}

void CudaBackend::synchronize_stream(int index, int id) {
  activate(index);
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(devices_[index].streams[id].stream));
  report_index_fault(index);
}

}  // namespace tessera::detail
