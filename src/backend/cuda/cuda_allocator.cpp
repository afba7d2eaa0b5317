#include "backend/cuda/cuda_allocator.h"

#include <cuda_runtime.h>

#include <bit>

#include "backend/cuda/cuda_check.h"

// Note [CUDA caching allocator]
// cudaMalloc and cudaFree are slow and cudaFree synchronizes the device, so freed blocks go
// to per-size free lists and are handed out again. Each GPU has one stream and all work on
// its memory is queued there (peer copies make the destination's stream wait on an event),
// so a block freed on the host while kernels still use it can be reused at once: whatever
// is queued next on that stream runs after them. Sizes round to 512 B below 1 MiB and to
// quarter powers of two above, so reuse wastes at most 25%.

namespace tessera::detail {

std::size_t CudaAllocator::round_size(std::size_t bytes) {
  constexpr std::size_t kSmall = std::size_t{1} << 20;
  if (bytes <= kSmall) return (bytes + 511) / 512 * 512;
  const std::size_t step = std::bit_floor(bytes) / 4;
  return (bytes + step - 1) / step * step;
}

void* CudaAllocator::allocate(std::size_t bytes) {
  const std::size_t size = round_size(bytes);
  {
    std::lock_guard lock(mutex_);
    auto it = free_blocks_.find(size);
    if (it != free_blocks_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_bytes_ -= size;
      return p;
    }
  }
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, size);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: clear it so later calls do not see it
    return nullptr;
  }
  TESSERA_CUDA_CHECK(status);
  std::lock_guard lock(mutex_);
  reserved_bytes_ += size;
  return p;
}

void CudaAllocator::deallocate(void* ptr, std::size_t bytes) {
  const std::size_t size = round_size(bytes);
  std::lock_guard lock(mutex_);
  free_blocks_[size].push_back(ptr);
  cached_bytes_ += size;
}

std::size_t CudaAllocator::reserved() const {
  std::lock_guard lock(mutex_);
  return reserved_bytes_;
}

std::size_t CudaAllocator::largest_cached_block() const {
  std::lock_guard lock(mutex_);
  for (auto it = free_blocks_.rbegin(); it != free_blocks_.rend(); ++it) {
    if (!it->second.empty()) return it->first;
  }
  return 0;
}

void CudaAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  for (auto& [size, blocks] : free_blocks_) {
    for (void* p : blocks) TESSERA_CUDA_CHECK(cudaFree(p));
    reserved_bytes_ -= size * blocks.size();
  }
  free_blocks_.clear();
  cached_bytes_ = 0;
}

}  // namespace tessera::detail
