#pragma once
// Events for ordering streams and for the allocator's pending blocks, reused instead of
// created and destroyed each time (each of those is a driver call). One pool per GPU.
#include <cuda_runtime.h>

#include <mutex>
#include <vector>

namespace tessera::detail {

class EventPool {
 public:
  EventPool() = default;
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  // The GPU whose events the pool makes (set once, before the first acquire).
  void set_device(int device) { device_ = device; }
  // A timing-free event of the pool's GPU, whichever GPU is current (a new one is made with
  // the pool's GPU current, then the caller's made current again).
  cudaEvent_t acquire();
  // Back to the pool. Safe as soon as the last cudaEventRecord/cudaStreamWaitEvent call on
  // it has returned: a wait already queued keeps the state it saw.
  void release(cudaEvent_t event);

 private:
  int device_ = 0;
  std::mutex mutex_;
  std::vector<cudaEvent_t> free_;
};

// `waiter` waits (on the device) for the work queued so far on `signaller`, whose GPU must
// be the pool's: an event is recorded on its stream's device, and any stream may wait on it.
void wait_for(EventPool& pool, cudaStream_t waiter, cudaStream_t signaller);

}  // namespace tessera::detail
