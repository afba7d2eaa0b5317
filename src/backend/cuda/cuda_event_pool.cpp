#include "backend/cuda/cuda_event_pool.h"

#include "backend/cuda/cuda_check.h"

namespace tessera::detail {

EventPool::~EventPool() {
  for (cudaEvent_t e : free_) (void)cudaEventDestroy(e);
}

cudaEvent_t EventPool::acquire() {
  {
    std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      const cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
  }
  // An event belongs to the GPU current when it is made, and is recorded only on that GPU's
  // streams; a caller may have another GPU current (a tensor freed on the host, say).
  int current = -1;
  TESSERA_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device_) TESSERA_CUDA_CHECK(cudaSetDevice(device_));
  cudaEvent_t e = nullptr;
  const cudaError_t status = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  if (current != device_ && cudaSetDevice(current) != cudaSuccess) (void)cudaGetLastError();
  TESSERA_CUDA_CHECK(status);
  return e;
}

void EventPool::release(cudaEvent_t event) {
  std::lock_guard lock(mutex_);
  free_.push_back(event);
}

void wait_for(EventPool& pool, cudaStream_t waiter, cudaStream_t signaller) {
  const cudaEvent_t event = pool.acquire();
  TESSERA_CUDA_CHECK(cudaEventRecord(event, signaller));
  TESSERA_CUDA_CHECK(cudaStreamWaitEvent(waiter, event, 0));
  pool.release(event);
}

}  // namespace tessera::detail
