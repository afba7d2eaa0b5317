#include "backend/cpu/cpu_allocator.h"

#include <sys/mman.h>

#include <bit>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "core/check.h"

// Note [CPU caching allocator]
// The first write to a fresh 4 KiB page costs ~10 us on the machines we measure on, so a
// training loop that frees and reallocates its activations every step would spend its
// time in page faults. Freed blocks are kept in per-size free lists (sizes rounded to
// 1/4-power-of-two classes, so reuse wastes at most 25%) and handed out again; blocks of
// 2 MiB or more are 2 MiB aligned and marked for transparent huge pages, which cuts the
// first-touch cost ~40x. The cache is capped so an idle process does not hoard memory.

// Note [Memory freed in queue order]
// A kernel queued on a CPU device's work queue (a logical device's, or a side stream's) holds
// borrowed handles to its tensors (Storage::Borrow, made by CpuBackendBase::launch_with), not
// owning ones, so a tensor's memory comes back to the allocator as soon as the host drops its
// last handle, while kernels that use it may still be queued. The allocator keeps such a
// block aside with the last ticket of each of the device's queues (QueueUses) and hands it
// out again only where no queued use can see the new contents, as CUDA's caching allocators
// do with streams:
// - to a host thread whose next work on the device goes to one of those queues (its current
//   stream's, CpuBackendBase::allocate), once the uses on the other queues have run: work it
//   queues there runs after the old uses, and work it sends to another stream of the device
//   is ordered after that queue's (Note [CPU side streams]);
// - to anyone, once every use has run.
// A queue's own thread (a kernel allocating a scratch tensor) is never "later" on its queue,
// so it gets only blocks whose uses have all run. A pending block whose uses have all run
// moves to the capped cache when a block of its size is freed again or, for sizes nobody
// frees again, when any request has to take new memory from the system. Before this, a queued
// kernel owned its tensors, the memory came back only when the queue reached it, and a host running
// 256 tasks ahead held every one of them: two logical devices training LeNet kept 1.29 GB against
// 0.49 GB on one (Note [Run-ahead memory] in work_queue.cpp).
//
// Cross-device work keeps this rule: a copy between two queued devices also queues a task on
// the destination that waits for the copy, and a collective's task on each device waits at
// its barriers for the others', so the last ticket of a block's own device covers every
// task on another device that touched it. Kernels with owning handles (collectives,
// copies between devices) keep their tensors alive as before; when such a kernel drops the
// last handle, on the queue's thread, the block still waits for the tickets of that moment.
// Graph recordings borrow too, and their memory is the graph's (Note [Memory of CPU graphs]
// in cpu_graph.cpp).

namespace tessera::detail {
namespace {

constexpr std::size_t kAlignment = 64;
constexpr std::size_t kHugePage = std::size_t{2} << 20;

}  // namespace

void QueueUses::add(WorkQueue* queue) {
  const std::uint64_t ticket = queue->last_ticket();
  if (ticket == 0 || queue->done(ticket)) return;
  queues[count] = queue;
  tickets[count] = ticket;
  ++count;
}

bool QueueUses::over_for(const WorkQueue* next) const {
  for (int i = 0; i < count; ++i) {
    if (queues[i] != next && !queues[i]->done(tickets[i])) return false;
  }
  return true;
}

std::size_t CpuAllocator::round_size(std::size_t bytes) {
  if (bytes <= 256) return (bytes + kAlignment - 1) / kAlignment * kAlignment;
  // Four classes per power of two: 256, 320, 384, 448, 512, 640, ...
  const std::size_t pow2 = std::bit_floor(bytes);
  const std::size_t step = pow2 / 4;
  return (bytes + step - 1) / step * step;
}

void* CpuAllocator::allocate(std::size_t bytes, const WorkQueue* next) {
  const std::size_t size = round_size(bytes);
  std::vector<void*> freed;
  {
    std::lock_guard lock(mutex_);
    if (void* p = cache_.take(size)) return p;
    if (void* p = take_pending(size, next)) return p;
    // About to take new memory: first retire the pending blocks of every size whose uses
    // have run, so a size nobody frees again does not hold them outside the cache's cap.
    if (pending_bytes_ > 0) {
      for (auto& [other, list] : pending_) retire_pending(other, list, freed);
    }
  }
  for (void* p : freed) std::free(p);
  const std::size_t align = size >= kHugePage ? kHugePage : kAlignment;
  const std::size_t padded = (size + align - 1) / align * align;
  void* p = std::aligned_alloc(align, padded);
  if (p == nullptr) return nullptr;
  if (align == kHugePage) madvise(p, padded, MADV_HUGEPAGE);
  std::lock_guard lock(mutex_);
  reserved_bytes_ += size;
  return p;
}

void* CpuAllocator::take_pending(std::size_t size, const WorkQueue* next) {
  // Oldest first, and only a few: the oldest are the likeliest to be over, and the lock is
  // held (a host far ahead of its queue finds its own queue's blocks at the front).
  constexpr std::size_t kLook = 8;
  const auto it = pending_.find(size);
  if (it == pending_.end()) return nullptr;
  std::deque<Pending>& list = it->second;
  for (std::size_t i = 0; i < list.size() && i < kLook; ++i) {
    if (!list[i].uses.over_for(next)) continue;
    void* p = list[i].ptr;
    list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
    pending_bytes_ -= size;
    return p;
  }
  return nullptr;
}

void CpuAllocator::retire_pending(std::size_t size, std::deque<Pending>& list,
                                  std::vector<void*>& freed) {
  while (!list.empty() && list.front().uses.over_for(nullptr)) {
    void* p = list.front().ptr;
    list.pop_front();
    pending_bytes_ -= size;
    if (!cache_.put(p, size, max_cached_)) {
      reserved_bytes_ -= size;
      freed.push_back(p);
    }
  }
}

void CpuAllocator::deallocate(void* ptr, std::size_t bytes, const QueueUses& uses) {
  const std::size_t size = round_size(bytes);
  std::vector<void*> freed;
  {
    std::lock_guard lock(mutex_);
    if (!graph_owned_.empty()) {
      if (auto it = graph_owned_.find(ptr); it != graph_owned_.end()) {
        // The graph's until it goes; during its capture, for its next recorded op.
        CpuGraphPool& pool = *it->second;
        if (it->second == capturing_) {
          pool.free_blocks[size].push_back(ptr);
        } else {
          pool.freed_after.push_back({ptr, size, uses});
        }
        return;
      }
    }
    if (!uses.over_for(nullptr)) {
      std::deque<Pending>& list = pending_[size];
      retire_pending(size, list, freed);  // the blocks this size's earlier frees left here
      list.push_back({ptr, uses});
      pending_bytes_ += size;
    } else if (cache_.put(ptr, size, max_cached_)) {
      return;
    } else {
      reserved_bytes_ -= size;
      freed.push_back(ptr);
    }
  }
  for (void* p : freed) std::free(p);
}

void CpuAllocator::begin_capture(std::shared_ptr<CpuGraphPool> pool) {
  std::lock_guard lock(mutex_);
  capturing_ = std::move(pool);
}

void CpuAllocator::end_capture() {
  std::lock_guard lock(mutex_);
  capturing_.reset();
}

void* CpuAllocator::allocate_for_graph(std::size_t bytes) {
  const std::size_t size = round_size(bytes);
  {
    std::lock_guard lock(mutex_);
    TESSERA_INTERNAL_ASSERT(capturing_ != nullptr, "a graph's block outside its capture");
    std::vector<void*>& reusable = capturing_->free_blocks[size];
    if (!reusable.empty()) {
      void* p = reusable.back();
      reusable.pop_back();
      return p;
    }
  }
  // A block nothing queued uses (the cache's, or new): the pool owns it from here on.
  void* p = allocate(bytes, nullptr);
  if (p == nullptr) return nullptr;
  std::lock_guard lock(mutex_);
  capturing_->owned.push_back(p);
  graph_owned_.emplace(p, capturing_);
  return p;
}

bool CpuAllocator::made_for_capture(const void* ptr) const {
  std::lock_guard lock(mutex_);
  const auto it = graph_owned_.find(ptr);
  return it != graph_owned_.end() && it->second == capturing_;
}

void CpuAllocator::release(const std::shared_ptr<CpuGraphPool>& pool) {
  std::vector<void*> freed;
  {
    std::lock_guard lock(mutex_);
    if (capturing_ == pool) capturing_.reset();
    // Blocks still held by tensors stay theirs; freeing them later goes to the cache.
    for (void* p : pool->owned) graph_owned_.erase(p);
    // Every replay has run (each held the recording that holds the pool).
    const auto give_back = [&](void* p, std::size_t size) {
      if (!cache_.put(p, size, max_cached_)) {
        reserved_bytes_ -= size;
        freed.push_back(p);
      }
    };
    for (auto& [size, blocks] : pool->free_blocks) {
      for (void* p : blocks) give_back(p, size);
    }
    for (CpuGraphPool::Freed& f : pool->freed_after) {
      if (f.uses.over_for(nullptr)) {
        give_back(f.ptr, f.size);
      } else {
        pending_[f.size].push_back({f.ptr, f.uses});
        pending_bytes_ += f.size;
      }
    }
    pool->free_blocks.clear();
    pool->freed_after.clear();
    pool->owned.clear();
  }
  for (void* p : freed) std::free(p);
}

std::size_t CpuAllocator::reserved() const {
  std::lock_guard lock(mutex_);
  return reserved_bytes_;
}

std::size_t CpuAllocator::cached() const {
  std::lock_guard lock(mutex_);
  return cache_.cached_bytes() + pending_bytes_;
}

std::size_t CpuAllocator::largest_cached_block() const {
  std::lock_guard lock(mutex_);
  std::size_t largest = cache_.largest_block();
  for (const auto& [size, list] : pending_) {
    if (!list.empty() && size > largest) largest = size;
  }
  return largest;
}

void CpuAllocator::empty_cache() {
  std::vector<std::pair<std::size_t, Pending>> waited;
  {
    std::lock_guard lock(mutex_);
    cache_.drain([this](void* p, std::size_t size) {
      std::free(p);
      reserved_bytes_ -= size;
    });
    const bool may_wait = !WorkQueue::on_queue_thread();  // a queue cannot wait for itself
    for (auto& [size, list] : pending_) {
      std::deque<Pending> kept;
      for (Pending& b : list) {
        if (b.uses.over_for(nullptr)) {
          std::free(b.ptr);
          reserved_bytes_ -= size;
        } else if (may_wait) {
          waited.emplace_back(size, b);
        } else {
          kept.push_back(b);
          continue;
        }
        pending_bytes_ -= size;
      }
      list = std::move(kept);
    }
  }
  // Outside the lock: the queues free blocks as they go.
  for (auto& [size, b] : waited) {
    for (int i = 0; i < b.uses.count; ++i) b.uses.queues[i]->wait(b.uses.tickets[i]);
    std::free(b.ptr);
    std::lock_guard lock(mutex_);
    reserved_bytes_ -= size;
  }
}

}  // namespace tessera::detail
