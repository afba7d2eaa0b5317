#include "backend/cuda/pinned_pool.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"

namespace tessera::detail {

void* PinnedPool::acquire_staging(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  for (Block& b : staging_) {
    if (b.in_use || b.size < bytes) continue;
    const cudaError_t state = cudaEventQuery(b.ready);
    if (state == cudaErrorNotReady) continue;
    TESSERA_CUDA_CHECK(state);
    b.in_use = true;
    return b.ptr;
  }
  Block b;
  b.size = std::max<std::size_t>(bytes, std::size_t{1} << 20);
  TESSERA_CUDA_CHECK(cudaHostAlloc(&b.ptr, b.size, cudaHostAllocPortable));
  TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&b.ready, cudaEventDisableTiming));
  b.in_use = true;
  staging_.push_back(b);
  return b.ptr;
}

void PinnedPool::release_staging(void* block, cudaStream_t stream) {
  std::lock_guard lock(mutex_);
  for (Block& b : staging_) {
    if (b.ptr != block) continue;
    TESSERA_CUDA_CHECK(cudaEventRecord(b.ready, stream));
    b.in_use = false;
    return;
  }
}

void* PinnedPool::allocate(std::size_t bytes) {
  void* p = nullptr;
  const cudaError_t status = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return nullptr;
  }
  TESSERA_CUDA_CHECK(status);
  return p;
}

void PinnedPool::deallocate(void* ptr) {
  // Called from tensor destructors, which must not throw: a failure (e.g. the runtime is
  // shutting down at exit) leaks the block instead.
  if (cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();
}

}  // namespace tessera::detail
