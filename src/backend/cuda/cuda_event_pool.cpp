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
  cudaEvent_t e;
  TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
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
