#pragma once
// A caching allocator for CPU tensor memory. See Note [CPU caching allocator] and, for
// blocks freed while queued work may still use them, Note [Memory freed in queue order].
#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "backend/block_cache.h"
#include "backend/cpu/work_queue.h"
#include "backend/spin_lock.h"

namespace tessera::detail {

// The queues that may still use a freed block, each with the ticket of the last task that
// may: the block is free for anyone once all those tasks have run, and at once for work
// queued later on one of those queues.
struct QueueUses {
  static constexpr int kMax = 8;  // a device's default queue and its side streams' queues
  std::array<WorkQueue*, kMax> queues{};
  std::array<std::uint64_t, kMax> tickets{};
  int count = 0;

  // Adds `queue`'s last ticket, unless that task has run already (at most kMax queues).
  void add(WorkQueue* queue);
  // Whether work queued later on `next` (nullptr: work run anywhere else) comes after every
  // use: each use is done or on `next`.
  bool over_for(const WorkQueue* next) const;
};

// Memory of one graph being recorded or kept (Note [Memory of CPU graphs] in cpu_graph.cpp):
// every block made for its capture, and those of them freed, which only that capture reuses
// (its recorded order is the replay order) and which stay the graph's until it goes.
struct CpuGraphPool {
  std::unordered_map<std::size_t, std::vector<void*>> free_blocks;  // by rounded size
  std::vector<void*> owned;
  // Freed after the capture: eager work queued since may still use them.
  struct Freed {
    void* ptr;
    std::size_t size;
    QueueUses uses;
  };
  std::vector<Freed> freed_after;
};

class CpuAllocator {
 public:
  // `max_cached`: the most bytes kept in free blocks whose queued uses have all run.
  explicit CpuAllocator(std::size_t max_cached = std::size_t{4} << 30) : max_cached_(max_cached) {}

  // nullptr when the system has no memory for it. The block's next user queues its work on
  // `next` (nullptr: runs it anywhere else, or is a queue's own thread): blocks whose last
  // uses are queued there may come back before those uses have run.
  void* allocate(std::size_t bytes, const WorkQueue* next = nullptr);
  // `uses`: the queued tasks that may still read or write the block (none: it is free now).
  void deallocate(void* ptr, std::size_t bytes, const QueueUses& uses = {});
  // Bytes held: blocks in use plus cached free blocks.
  std::size_t reserved() const;
  // Bytes held in free blocks (those queued work may still use included), and the largest.
  std::size_t cached() const;
  std::size_t largest_cached_block() const;
  // Frees every cached block; blocks that queued work may still use are waited for first,
  // unless the caller is a queue's thread (then they stay).
  void empty_cache();

  // Graph capture: while a pool is set, allocate_for_graph takes blocks from it (or new
  // ones it then owns), and a block the pool owns goes back to it when freed, whenever
  // that is, until release() returns the pool's free blocks to the cache and leaves the
  // blocks still in use to their tensors.
  void begin_capture(std::shared_ptr<CpuGraphPool> pool);
  void end_capture();
  void* allocate_for_graph(std::size_t bytes);
  // Whether `ptr` is a block made for the capture under way.
  bool made_for_capture(const void* ptr) const;
  void release(const std::shared_ptr<CpuGraphPool>& pool);

  // Block size actually used for a request (exposed for tests).
  static std::size_t round_size(std::size_t bytes);

 private:
  struct Pending {
    void* ptr;
    QueueUses uses;
  };
  // A pending block of `size` that `next` may have now, or nullptr.
  void* take_pending(std::size_t size, const WorkQueue* next);
  // Moves the pending blocks whose uses have all run, oldest first, into the capped cache,
  // freeing those it has no room for. Called with the lock held.
  void retire_pending(std::size_t size, std::deque<Pending>& list, std::vector<void*>& freed);

  const std::size_t max_cached_;

  mutable SpinLock mutex_;  // the host allocates while device queues free
  BlockCache cache_;        // freed blocks by rounded size
  // Freed blocks that queued work may still use, by rounded size, oldest first.
  std::unordered_map<std::size_t, std::deque<Pending>> pending_;
  std::size_t pending_bytes_ = 0;
  std::shared_ptr<CpuGraphPool> capturing_;
  std::unordered_map<const void*, std::shared_ptr<CpuGraphPool>> graph_owned_;
  std::size_t reserved_bytes_ = 0;
};

}  // namespace tessera::detail
