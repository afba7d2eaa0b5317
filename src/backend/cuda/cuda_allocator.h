#pragma once
// The CUDA runtime calls behind one GPU's caching allocator (backend/device_caching_allocator.h,
// where its bookkeeping lives and is tested without a GPU; Note [CUDA caching allocator]).
#include <cuda_runtime.h>

#include <cstddef>

#include "backend/cuda/cuda_event_pool.h"
#include "backend/device_caching_allocator.h"

namespace tessera::detail {

struct CudaDeviceRuntime {
  using Event = cudaEvent_t;
  using Stream = cudaStream_t;
  EventPool* events = nullptr;  // the GPU's, for blocks that wait for side streams

  void* try_malloc(std::size_t bytes);
  void free(void* ptr);
  Event acquire_event() { return events->acquire(); }
  void release_event(Event event) { events->release(event); }
  void record(Event event, Stream stream);
  bool done(Event event);
  void synchronize(Event event);
  bool try_synchronize(Stream stream);
};

// One per GPU; the backend makes that GPU current around every call.
class CudaAllocator : public BasicCachingAllocator<CudaDeviceRuntime> {
 public:
  explicit CudaAllocator(EventPool& events) : BasicCachingAllocator(CudaDeviceRuntime{&events}) {}
};

extern template class BasicCachingAllocator<CudaDeviceRuntime>;

}  // namespace tessera::detail
