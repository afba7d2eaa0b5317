#pragma once
// Page-locked host memory kept for reuse: blocks for pinned CPU tensors, and staging blocks
// for copies from pageable host memory, each reused only once the copy that read it has
// finished (an event recorded after the copy). The bookkeeping is here, apart from the
// runtime that provides the memory and the events (backend/cuda/pinned_pool.h), so that it
// is tested without a GPU (tests/backend/pinned_pool_test.cpp). A Runtime provides:
//   void* host_alloc(size_t)       page-locked memory, or throws
//   void* try_host_alloc(size_t)   the same, but nullptr when there is none left
//   void host_free(void*)          never throws (called from tensor destructors)
//   Event new_event(); void record(Event, Stream); bool done(Event)  (throws on errors)
//   void destroy_event(Event)      never throws
// An event belongs to the GPU that was current when it was made, and is recorded only on
// that GPU's streams, so a staging block remembers its event's device and, reused for a
// copy to another GPU, gets a new event there (its old one has fired by then).
#include <algorithm>
#include <bit>
#include <cstddef>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "backend/block_cache.h"

namespace tessera::detail {

// 4 KiB pages, then four size classes per power of two, so reuse wastes at most 25%.
inline std::size_t pinned_size(std::size_t bytes) {
  constexpr std::size_t kPage = 4096;
  if (bytes <= kPage) return kPage;
  const std::size_t step = std::max(kPage, std::bit_floor(bytes) / 4);
  return (bytes + step - 1) / step * step;
}

template <typename Runtime>
class BasicPinnedPool {
 public:
  using Event = typename Runtime::Event;
  using Stream = typename Runtime::Stream;
  // Kept tensor blocks beyond this are returned to the runtime.
  static constexpr std::size_t kMaxCached = std::size_t{1} << 30;
  // The smallest staging block: small copies share one instead of each pinning its own.
  static constexpr std::size_t kMinStaging = std::size_t{1} << 20;

  explicit BasicPinnedPool(Runtime runtime = {}) : runtime_(std::move(runtime)) {}
  BasicPinnedPool(const BasicPinnedPool&) = delete;
  BasicPinnedPool& operator=(const BasicPinnedPool&) = delete;

  // A staging block of at least `bytes`, free of pending copies, for a copy queued on
  // `device`, which the caller has made current.
  void* acquire_staging(std::size_t bytes, int device) {
    std::lock_guard lock(mutex_);
    Block* other = nullptr;  // a free block whose event is another device's
    for (Block& b : staging_) {
      if (b.in_use || b.size < bytes || !runtime_.done(b.ready)) continue;
      if (b.device != device) {
        if (other == nullptr) other = &b;
        continue;
      }
      b.in_use = true;
      return b.ptr;
    }
    if (other != nullptr) {
      const Event ready = runtime_.new_event();  // first: a throw leaves the block as it was
      runtime_.destroy_event(other->ready);
      other->ready = ready;
      other->device = device;
      other->in_use = true;
      return other->ptr;
    }
    Block b;
    b.size = std::max(bytes, kMinStaging);
    b.ptr = runtime_.host_alloc(b.size);
    b.ready = runtime_.new_event();
    b.device = device;
    b.in_use = true;
    staging_.push_back(b);
    return b.ptr;
  }
  // Returns a staging block once the work queued so far on `stream` is done.
  void release_staging(void* block, Stream stream) {
    std::lock_guard lock(mutex_);
    for (Block& b : staging_) {
      if (b.ptr != block) continue;
      runtime_.record(b.ready, stream);
      b.in_use = false;
      return;
    }
  }

  // Pinned memory for a CPU tensor; nullptr when there is none left. Freed blocks are kept
  // by size and handed out again: pinning costs a system call and freeing waits for the
  // device, and a DataLoader asks for two blocks every step. A tensor's block is reused as
  // soon as the tensor is gone and nothing queued reads it: the GPU copies that read it keep
  // the tensor alive until they have run (cuda_copy.cpp), and copies into it wait; the
  // kernels of a logical CPU device's queue read it through handles that do not keep it, so
  // its deallocate says how long they may (`still_read`).
  void* allocate(std::size_t bytes) {
    const std::size_t size = pinned_size(bytes);
    {
      std::lock_guard lock(mutex_);
      reclaim_read_blocks();
      if (void* p = free_blocks_.take(size)) return p;
    }
    if (void* p = runtime_.try_host_alloc(size)) return p;
    // Give the kept blocks back and try once more.
    std::lock_guard lock(mutex_);
    free_blocks_.drain([&](void* b, std::size_t) { runtime_.host_free(b); });
    return runtime_.try_host_alloc(size);
  }
  // `still_read`, when set, is true while queued work may still read the block: the block
  // is neither handed out nor freed until it turns false.
  void deallocate(void* ptr, std::size_t bytes, std::function<bool()> still_read = {}) {
    const std::size_t size = pinned_size(bytes);
    {
      std::lock_guard lock(mutex_);
      if (still_read && still_read()) {
        being_read_.push_back({ptr, size, std::move(still_read)});
        return;
      }
      if (free_blocks_.put(ptr, size, kMaxCached)) return;
    }
    runtime_.host_free(ptr);
  }

  // Bytes of tensor blocks kept for reuse.
  std::size_t cached_bytes() const {
    std::lock_guard lock(mutex_);
    return free_blocks_.cached_bytes();
  }
  // Freed tensor blocks that queued work may still read.
  std::size_t blocks_being_read() const {
    std::lock_guard lock(mutex_);
    return being_read_.size();
  }
  Runtime& runtime() { return runtime_; }

 private:
  struct ReadBlock {
    void* ptr;
    std::size_t size;
    std::function<bool()> still_read;
  };
  // Moves the freed blocks that nothing reads any more to the kept ones (or frees them past
  // kMaxCached). Under mutex_.
  void reclaim_read_blocks() {
    if (being_read_.empty()) return;
    std::erase_if(being_read_, [&](ReadBlock& b) {
      if (b.still_read()) return false;
      if (!free_blocks_.put(b.ptr, b.size, kMaxCached)) runtime_.host_free(b.ptr);
      return true;
    });
  }

  struct Block {
    void* ptr = nullptr;
    std::size_t size = 0;
    Event ready{};   // recorded after the last copy that read the block
    int device = 0;  // the device `ready` belongs to
    bool in_use = false;
  };
  Runtime runtime_;
  mutable std::mutex mutex_;
  std::vector<Block> staging_;
  BlockCache free_blocks_;             // tensors' blocks, by rounded size
  std::vector<ReadBlock> being_read_;  // freed, but queued work may still read them
};

}  // namespace tessera::detail
