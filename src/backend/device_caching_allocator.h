#pragma once
// A caching allocator for one GPU's memory: its bookkeeping, apart from the runtime that
// provides the memory and the events (backend/cuda/cuda_allocator.h), so that it is tested
// without a GPU (tests/backend/device_caching_allocator_test.cpp), as the pinned pool is.
// A Runtime provides:
//   void* try_malloc(size_t)   device memory, or nullptr when there is none left; throws
//                              on any other error
//   void free(void*)           throws on errors
//   Event acquire_event(); void release_event(Event)   (a pool of reusable events)
//   void record(Event, Stream); bool done(Event); void synchronize(Event)  (throw on errors)
//   bool try_synchronize(Stream)   waits for a stream; false on an error, never throws
//
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
// every replay may still touch them; the graph's destruction returns them to the cache,
// behind events of the streams in use as a freed block (a replay may still be running).
// Only the capturing thread's requests come from the pool: a block the pool lent to another
// thread could be one the recorded kernels write on every replay.
#include <bit>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tessera::detail {

// Memory of one captured graph: blocks made during its capture (reused only within that
// capture) and blocks freed during it (the replays may still read them). All of it goes
// back to the cache when the graph is destroyed.
struct GraphPool {
  std::map<std::size_t, std::vector<void*>> free_blocks;  // by rounded size
  std::vector<std::pair<void*, std::size_t>> kept;        // freed during capture, not ours
  std::vector<void*> owned;                               // every block made for the graph
};

template <typename Runtime>
class BasicCachingAllocator {
 public:
  using Event = typename Runtime::Event;
  using Stream = typename Runtime::Stream;

  explicit BasicCachingAllocator(Runtime runtime = {}) : runtime_(std::move(runtime)) {}
  BasicCachingAllocator(const BasicCachingAllocator&) = delete;
  BasicCachingAllocator& operator=(const BasicCachingAllocator&) = delete;

  static std::size_t round_size(std::size_t bytes) {
    constexpr std::size_t kSmall = std::size_t{1} << 20;
    if (bytes <= kSmall) return (bytes + 511) / 512 * 512;
    const std::size_t step = std::bit_floor(bytes) / 4;
    return (bytes + step - 1) / step * step;
  }

  // nullptr when the runtime has no memory left even after the cache was returned (the
  // front end then throws OutOfMemoryError). The caller has made the device current.
  void* allocate(std::size_t bytes) {
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
    void* p = runtime_.try_malloc(size);
    if (p == nullptr) return nullptr;
    std::lock_guard lock(mutex_);
    reserved_bytes_ += size;
    if (pool) {
      pool->owned.push_back(p);
      graph_owned_.emplace(p, pool);
    }
    return p;
  }

  // `in_use`: the streams that may still use the block (other than the one the next
  // allocation will queue on); empty when the device runs one stream only. The block is
  // reused once an event recorded now on each of them has fired.
  void deallocate(void* ptr, std::size_t bytes, std::span<const Stream> in_use = {}) {
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
    Pending p;
    p.ptr = ptr;
    p.size = size;
    pend_locked(std::move(p), in_use);
  }

  std::size_t reserved() const {
    std::lock_guard lock(mutex_);
    return reserved_bytes_;
  }
  std::size_t cached() const {
    std::lock_guard lock(mutex_);
    return cached_bytes_;
  }
  std::size_t largest_cached_block() const {
    std::lock_guard lock(mutex_);
    for (auto it = free_blocks_.rbegin(); it != free_blocks_.rend(); ++it) {
      if (!it->second.empty()) return it->first;
    }
    return 0;
  }

  // Frees every cached block (waits for the device, pending blocks too).
  void empty_cache() {
    std::lock_guard lock(mutex_);
    for (Pending& p : pending_) {
      for (Event e : p.events) {
        runtime_.synchronize(e);
        runtime_.release_event(e);
      }
      cache_locked(p);
    }
    pending_.clear();
    for (auto& [size, blocks] : free_blocks_) {
      for (void* p : blocks) runtime_.free(p);
      reserved_bytes_ -= size * blocks.size();
    }
    free_blocks_.clear();
    cached_bytes_ = 0;
  }

  // While a pool is set, the calling thread's allocations come from it and every free is
  // kept by it.
  void begin_capture(std::shared_ptr<GraphPool> pool) {
    std::lock_guard lock(mutex_);
    capturing_ = std::move(pool);
    capture_thread_ = std::this_thread::get_id();
  }
  void end_capture() {
    std::lock_guard lock(mutex_);
    capturing_.reset();
  }
  // Returns a destroyed graph's memory to the cache; `in_use` as for deallocate (the streams
  // a replay may still run on).
  void release(const std::shared_ptr<GraphPool>& pool, std::span<const Stream> in_use = {}) {
    std::lock_guard lock(mutex_);
    // Blocks still held by tensors stay theirs; freeing them later goes to the cache.
    for (void* p : pool->owned) graph_owned_.erase(p);
    Pending freed;
    for (auto& [size, blocks] : pool->free_blocks) {
      for (void* p : blocks) freed.graph_blocks.emplace_back(p, size);
    }
    freed.graph_blocks.insert(freed.graph_blocks.end(), pool->kept.begin(), pool->kept.end());
    if (in_use.empty() || freed.graph_blocks.empty()) {
      cache_locked(freed);
    } else {
      pend_locked(std::move(freed), in_use);  // behind one event per stream, for all of them
    }
    pool->free_blocks.clear();
    pool->kept.clear();
    pool->owned.clear();
  }

 private:
  struct Pending {
    void* ptr = nullptr;  // a freed block (deallocate)
    std::size_t size = 0;
    std::vector<std::pair<void*, std::size_t>> graph_blocks;  // a destroyed graph's (release)
    std::vector<Event> events;
  };

  void cache_locked(const Pending& p) {
    if (p.ptr != nullptr) {
      free_blocks_[p.size].push_back(p.ptr);
      cached_bytes_ += p.size;
    }
    for (auto [ptr, size] : p.graph_blocks) {
      free_blocks_[size].push_back(ptr);
      cached_bytes_ += size;
    }
  }

  // Holds p's blocks until an event recorded now on each of `in_use` has fired. Tensor and
  // graph destructors call this, so a runtime error does not throw: the host then waits for
  // those streams and caches the blocks, or, when even that fails, never reuses them.
  void pend_locked(Pending p, std::span<const Stream> in_use) {
    try {
      p.events.reserve(in_use.size());
      for (Stream s : in_use) {
        p.events.push_back(runtime_.acquire_event());
        runtime_.record(p.events.back(), s);
      }
      pending_.push_back(std::move(p));
      return;
    } catch (...) {
    }
    for (Event e : p.events) runtime_.release_event(e);
    for (Stream s : in_use) {
      if (!runtime_.try_synchronize(s)) return;  // the blocks stay reserved, out of use
    }
    cache_locked(p);
  }

  // Pending blocks whose events fired go back to the free lists, oldest first.
  void reclaim_locked() {
    while (!pending_.empty()) {
      Pending& p = pending_.front();
      for (Event e : p.events) {
        // Later blocks were freed later: their events have not fired either.
        if (!runtime_.done(e)) return;
      }
      for (Event e : p.events) runtime_.release_event(e);
      cache_locked(p);
      pending_.pop_front();
    }
  }

  Runtime runtime_;
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
