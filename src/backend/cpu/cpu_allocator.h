#pragma once
// A caching allocator for CPU tensor memory. See Note [CPU caching allocator].
#include <cstddef>
#include "backend/block_cache.h"
#include "backend/spin_lock.h"

namespace tessera::detail {

class CpuAllocator {
 public:
  // nullptr when the system has no memory for it.
  void* allocate(std::size_t bytes);
  void deallocate(void* ptr, std::size_t bytes);
  // Bytes held: blocks in use plus cached free blocks.
  std::size_t reserved() const;
  // Bytes held in free blocks, and the largest of them.
  std::size_t cached() const;
  std::size_t largest_cached_block() const;
  void empty_cache();

  // Block size actually used for a request (exposed for tests).
  static std::size_t round_size(std::size_t bytes);

 private:
  mutable SpinLock mutex_;  // the host allocates while device queues free
  BlockCache cache_;        // freed blocks by rounded size
  std::size_t reserved_bytes_ = 0;
};

}  // namespace tessera::detail
