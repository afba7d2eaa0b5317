#pragma once
// The CUDA runtime calls behind the pinned host memory pool (backend/pinned_pool.h, where
// its bookkeeping lives and is tested without a GPU).
#include <cuda_runtime.h>

#include <cstddef>

#include "backend/pinned_pool.h"

namespace tessera::detail {

struct CudaPinnedRuntime {
  using Event = cudaEvent_t;
  using Stream = cudaStream_t;
  void* host_alloc(std::size_t bytes);
  void* try_host_alloc(std::size_t bytes);
  void host_free(void* ptr);
  Event new_event();  // of the current GPU
  void destroy_event(Event event);
  void record(Event event, Stream stream);
  bool done(Event event);
};

using PinnedPool = BasicPinnedPool<CudaPinnedRuntime>;
extern template class BasicPinnedPool<CudaPinnedRuntime>;

}  // namespace tessera::detail
