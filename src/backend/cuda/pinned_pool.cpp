#include "backend/cuda/pinned_pool.h"

#include <algorithm>
#include <bit>

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

namespace {

// Kept blocks beyond this are returned to the driver.
constexpr std::size_t kMaxCachedPinned = std::size_t{1} << 30;

// 4 KiB pages, then four size classes per power of two, so reuse wastes at most 25%.
std::size_t pinned_size(std::size_t bytes) {
  constexpr std::size_t kPage = 4096;
  if (bytes <= kPage) return kPage;
  const std::size_t step = std::max(kPage, std::bit_floor(bytes) / 4);
  return (bytes + step - 1) / step * step;
}

}  // namespace

// A pinned tensor's block is reused as soon as the tensor is gone: the copies that read it
// keep the tensor alive until their event fires (cuda_copy.cpp), and copies into it wait.
void* PinnedPool::allocate(std::size_t bytes) {
  const std::size_t size = pinned_size(bytes);
  {
    std::lock_guard lock(mutex_);
    if (void* p = free_blocks_.take(size)) return p;
  }
  void* p = nullptr;
  cudaError_t status = cudaHostAlloc(&p, size, cudaHostAllocPortable);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    // Give the kept blocks back and try once more.
    std::lock_guard lock(mutex_);
    free_blocks_.drain([](void* b, std::size_t) { (void)cudaFreeHost(b); });
    status = cudaHostAlloc(&p, size, cudaHostAllocPortable);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
  }
  TESSERA_CUDA_CHECK(status);
  return p;
}

void PinnedPool::deallocate(void* ptr, std::size_t bytes) {
  const std::size_t size = pinned_size(bytes);
  {
    std::lock_guard lock(mutex_);
    if (free_blocks_.put(ptr, size, kMaxCachedPinned)) return;
  }
  // Called from tensor destructors, which must not throw: a failure (e.g. the runtime is
  // shutting down at exit) leaks the block instead.
  if (cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();
}

}  // namespace tessera::detail
