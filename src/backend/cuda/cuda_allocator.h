#pragma once
// A caching allocator for one GPU. See Note [CUDA caching allocator] in cuda_allocator.cpp.
#include <cuda_runtime.h>

#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend/cuda/cuda_event_pool.h"

namespace tessera::detail {

// Memory of one captured graph: blocks made during its capture (reused only within that
// capture) and blocks freed during it (the replays may still read them). All of it goes
// back to the cache when the graph is destroyed.
struct GraphPool {
  std::map<std::size_t, std::vector<void*>> free_blocks;  // by rounded size
  std::vector<std::pair<void*, std::size_t>> kept;        // freed during capture, not ours
  std::vector<void*> owned;                               // every block made for the graph
};

class CudaAllocator {
 public:
  // `events` is the GPU's pool, for blocks that wait for side streams.
  CudaAllocator(int device, EventPool& events) : device_(device), events_(events) {}
  // nullptr when cudaMalloc fails even after the cache was returned (the front end then
  // throws OutOfMemoryError). The caller has made `device` current.
  void* allocate(std::size_t bytes);
  // `in_use`: the streams that may still use the block (other than the one the next
  // allocation will queue on); empty when the device runs one stream only. The block is
  // reused once an event recorded now on each of them has fired.
  void deallocate(void* ptr, std::size_t bytes, std::span<const cudaStream_t> in_use = {});
  std::size_t reserved() const;
  std::size_t largest_cached_block() const;
  // cudaFree every cached block (waits for the device, pending blocks too).
  void empty_cache();

  // While a pool is set, allocations come from it and frees are kept by it.
  void begin_capture(std::shared_ptr<GraphPool> pool);
  void end_capture();
  // Returns a destroyed graph's memory to the cache.
  void release(const std::shared_ptr<GraphPool>& pool);

  static std::size_t round_size(std::size_t bytes);

 private:
  struct Pending {
    void* ptr;
    std::size_t size;
    std::vector<cudaEvent_t> events;
  };
  void reclaim_locked();  // pending blocks whose events fired go back to the free lists

  int device_;
  EventPool& events_;
  mutable std::mutex mutex_;
  std::map<std::size_t, std::vector<void*>> free_blocks_;  // by rounded size
  std::deque<Pending> pending_;
  std::shared_ptr<GraphPool> capturing_;
  std::thread::id capture_thread_;  // the thread whose allocations come from capturing_
  std::unordered_map<void*, std::shared_ptr<GraphPool>> graph_owned_;
  std::size_t reserved_bytes_ = 0;
  std::size_t cached_bytes_ = 0;
};

}  // namespace tessera::detail
