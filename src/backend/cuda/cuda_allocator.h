#pragma once
// A caching allocator for one GPU. See Note [CUDA caching allocator] in cuda_allocator.cpp.
#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

namespace tessera::detail {

class CudaAllocator {
 public:
  explicit CudaAllocator(int device) : device_(device) {}
  // nullptr when cudaMalloc fails even after the cache was returned (the front end then
  // throws OutOfMemoryError). The caller has made `device` current.
  void* allocate(std::size_t bytes);
  void deallocate(void* ptr, std::size_t bytes);
  std::size_t reserved() const;
  std::size_t largest_cached_block() const;
  // cudaFree every cached block (cudaFree waits for the device).
  void empty_cache();

  static std::size_t round_size(std::size_t bytes);

 private:
  int device_;
  mutable std::mutex mutex_;
  std::map<std::size_t, std::vector<void*>> free_blocks_;  // by rounded size
  std::size_t reserved_bytes_ = 0;
  std::size_t cached_bytes_ = 0;
};

}  // namespace tessera::detail
