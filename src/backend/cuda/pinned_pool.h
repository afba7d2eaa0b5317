#pragma once
// Page-locked host memory: blocks for pinned CPU tensors, and staging blocks for copies from
// pageable host memory, each reused only once the copy that read it has finished (an event
// recorded after the copy).
#include <cuda_runtime.h>

#include <cstddef>
#include <mutex>
#include <vector>

#include "backend/block_cache.h"

namespace tessera::detail {

class PinnedPool {
 public:
  // A staging block of at least `bytes`, free of pending copies.
  void* acquire_staging(std::size_t bytes);
  // Returns a staging block once the work queued so far on `stream` is done.
  void release_staging(void* block, cudaStream_t stream);

  // Pinned memory for a CPU tensor; nullptr when there is none left. Freed blocks are kept
  // by size and handed out again: cudaHostAlloc costs a page-locking system call and
  // cudaFreeHost waits for the device, and a DataLoader asks for two blocks every step.
  void* allocate(std::size_t bytes);
  void deallocate(void* ptr, std::size_t bytes);

 private:
  struct Block {
    void* ptr = nullptr;
    std::size_t size = 0;
    cudaEvent_t ready = nullptr;  // recorded after the last copy that read the block
    bool in_use = false;
  };
  std::mutex mutex_;
  std::vector<Block> staging_;
  BlockCache free_blocks_;  // tensors' blocks, by rounded size
};

}  // namespace tessera::detail
