#include "backend/cuda/cuda_allocator.h"

#include <bit>
#include <thread>

#include "backend/cuda/cuda_check.h"

// Note [CUDA caching allocator]
// cudaMalloc and cudaFree are slow and cudaFree synchronizes the device, so freed blocks go
// to per-size free lists and are handed out again. Sizes round to 512 B below 1 MiB and to
// quarter powers of two above, so reuse wastes at most 25%.
// When a device runs one stream, a block freed on the host while kernels still use it can
// be reused at once: whatever is queued next on that stream runs after them. While side
// streams (stream.h) have work the default stream has not joined, the next user of a block
// may run on another stream than its last one, so the backend passes the streams in use
// and the block waits in pending_ until an event recorded on each of them has fired.
// During a graph capture, blocks come from the graph's pool (reusable within that capture,
// whose recorded order is the replay order) and blocks freed are kept by the pool, because
// every replay may still touch them; the graph's destruction returns them to the cache.
// Only the capturing thread's requests come from the pool: a block the pool lent to another
// thread could be one the recorded kernels write on every replay.

namespace tessera::detail {

std::size_t CudaAllocator::round_size(std::size_t bytes) {
  constexpr std::size_t kSmall = std::size_t{1} << 20;
  if (bytes <= kSmall) return (bytes + 511) / 512 * 512;
  const std::size_t step = std::bit_floor(bytes) / 4;
  return (bytes + step - 1) / step * step;
}

void CudaAllocator::reclaim_locked() {
  while (!pending_.empty()) {
    Pending& p = pending_.front();
    for (cudaEvent_t e : p.events) {
      const cudaError_t status = cudaEventQuery(e);
      if (status == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return;  // later blocks were freed later: their events have not fired either
      }
      TESSERA_CUDA_CHECK(status);
    }
    for (cudaEvent_t e : p.events) events_.release(e);
    free_blocks_[p.size].push_back(p.ptr);
    cached_bytes_ += p.size;
    pending_.pop_front();
  }
}

void* CudaAllocator::allocate(std::size_t bytes) {
  const std::size_t size = round_size(bytes);
  std::shared_ptr<GraphPool> pool;  // the capture's, for the capturing thread only
  {
    std::lock_guard lock(mutex_);
    if (capturing_ && std::this_thread::get_id() == capture_thread_) pool = capturing_;
    auto& lists = pool ? pool->free_blocks : free_blocks_;
    if (!pool && !pending_.empty()) reclaim_locked();
    auto it = lists.find(size);
    if (it != lists.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      if (!pool) cached_bytes_ -= size;
      return p;
    }
  }
  // During a capture this cudaMalloc is allowed: captures record in relaxed mode.
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, size);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: clear it so later calls do not see it
    return nullptr;
  }
  TESSERA_CUDA_CHECK(status);
  std::lock_guard lock(mutex_);
  reserved_bytes_ += size;
  if (pool) {
    pool->owned.push_back(p);
    graph_owned_.emplace(p, pool);
  }
  return p;
}

void CudaAllocator::deallocate(void* ptr, std::size_t bytes, std::span<const cudaStream_t> in_use) {
  const std::size_t size = round_size(bytes);
  std::lock_guard lock(mutex_);
  if (!graph_owned_.empty()) {
    if (auto it = graph_owned_.find(ptr); it != graph_owned_.end()) {
      it->second->free_blocks[size].push_back(ptr);  // the graph's until it is destroyed
      return;
    }
  }
  if (capturing_) {
    capturing_->kept.emplace_back(ptr, size);
    return;
  }
  if (in_use.empty()) {
    free_blocks_[size].push_back(ptr);
    cached_bytes_ += size;
    return;
  }
  Pending p{ptr, size, {}};
  for (cudaStream_t s : in_use) {
    const cudaEvent_t e = events_.acquire();
    TESSERA_CUDA_CHECK(cudaEventRecord(e, s));
    p.events.push_back(e);
  }
  pending_.push_back(std::move(p));
}

void CudaAllocator::begin_capture(std::shared_ptr<GraphPool> pool) {
  std::lock_guard lock(mutex_);
  capturing_ = std::move(pool);
  capture_thread_ = std::this_thread::get_id();
}

void CudaAllocator::end_capture() {
  std::lock_guard lock(mutex_);
  capturing_.reset();
}

void CudaAllocator::release(const std::shared_ptr<GraphPool>& pool) {
  std::lock_guard lock(mutex_);
  // Blocks still held by tensors stay theirs; freeing them later goes to the cache.
  for (void* p : pool->owned) graph_owned_.erase(p);
  for (auto& [size, blocks] : pool->free_blocks) {
    for (void* p : blocks) free_blocks_[size].push_back(p);
    cached_bytes_ += size * blocks.size();
  }
  for (auto [p, size] : pool->kept) {
    free_blocks_[size].push_back(p);
    cached_bytes_ += size;
  }
  pool->free_blocks.clear();
  pool->kept.clear();
  pool->owned.clear();
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
  for (Pending& p : pending_) {
    for (cudaEvent_t e : p.events) {
      TESSERA_CUDA_CHECK(cudaEventSynchronize(e));
      events_.release(e);
    }
    free_blocks_[p.size].push_back(p.ptr);
    cached_bytes_ += p.size;
  }
  pending_.clear();
  for (auto& [size, blocks] : free_blocks_) {
    for (void* p : blocks) TESSERA_CUDA_CHECK(cudaFree(p));
    reserved_bytes_ -= size * blocks.size();
  }
  free_blocks_.clear();
  cached_bytes_ = 0;
}

}  // namespace tessera::detail
