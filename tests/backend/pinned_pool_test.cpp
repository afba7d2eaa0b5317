// The pinned host memory pool's bookkeeping (backend/pinned_pool.h): size classes, reuse of
// freed tensor blocks, the cap on what it keeps, giving kept blocks back when the runtime
// runs out, and staging blocks reused only after the copies that read them, with an event
// of the GPU each copy goes to. The CUDA runtime is replaced by a fake that hands out
// addresses it never maps and events a test completes by hand, so all of it runs without a
// GPU.
#include "backend/pinned_pool.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace tessera::detail {
namespace {

constexpr std::size_t kKiB = 1024, kMiB = kKiB * 1024;

// What the fake runtime did, shared by the test and the pool's copy of the runtime.
struct FakeState {
  std::mutex mutex;
  std::size_t limit = SIZE_MAX;  // bytes the fake can pin at once
  std::uintptr_t next = 1 << 20;
  std::map<void*, std::size_t> live;  // pinned blocks and their sizes
  int allocs = 0, frees = 0;
  int current_device = 0;  // the GPU new events belong to
  struct Event {
    bool done = true;  // a new event has nothing to wait for
    int stream = -1;   // where it was last recorded
    int device = 0;
    bool destroyed = false;
  };
  std::vector<Event> events;
  // Streams 0-9 are GPU 0's, 10-19 GPU 1's.
  static int device_of(int stream) { return stream / 10; }

  std::size_t live_bytes() const {
    std::size_t n = 0;
    for (const auto& [p, size] : live) n += size;
    return n;
  }
  // The queued work of `stream` has run: its events fire.
  void finish(int stream) {
    std::lock_guard lock(mutex);
    for (Event& e : events) {
      if (e.stream == stream) e.done = true;
    }
  }
};

struct FakeRuntime {
  using Event = int;
  using Stream = int;
  std::shared_ptr<FakeState> s = std::make_shared<FakeState>();

  void* try_host_alloc(std::size_t bytes) {
    std::lock_guard lock(s->mutex);
    if (s->live_bytes() + bytes > s->limit) return nullptr;
    void* p = reinterpret_cast<void*>(s->next);
    s->next += bytes + 4096;
    s->live[p] = bytes;
    ++s->allocs;
    return p;
  }
  void* host_alloc(std::size_t bytes) {
    if (void* p = try_host_alloc(bytes)) return p;
    throw std::runtime_error("out of pinned memory");
  }
  void host_free(void* p) {
    std::lock_guard lock(s->mutex);
    EXPECT_EQ(s->live.erase(p), 1u) << "freed a block it does not hold";
    ++s->frees;
  }
  Event new_event() {
    std::lock_guard lock(s->mutex);
    s->events.push_back({.device = s->current_device});
    return static_cast<int>(s->events.size()) - 1;
  }
  void destroy_event(Event e) {
    std::lock_guard lock(s->mutex);
    EXPECT_FALSE(s->events.at(e).destroyed) << "event " << e << " destroyed twice";
    s->events.at(e).destroyed = true;
  }
  void record(Event e, Stream stream) {
    std::lock_guard lock(s->mutex);
    FakeState::Event& event = s->events.at(e);
    EXPECT_FALSE(event.destroyed) << "recorded a destroyed event";
    EXPECT_EQ(event.device, FakeState::device_of(stream))
        << "an event of GPU " << event.device << " recorded on a stream of GPU "
        << FakeState::device_of(stream);
    event.done = false;
    event.stream = stream;
  }
  bool done(Event e) {
    std::lock_guard lock(s->mutex);
    return s->events.at(e).done;
  }
};

using Pool = BasicPinnedPool<FakeRuntime>;

TEST(PinnedPool, SizesArePagesThenQuarterPowerOfTwoClasses) {
  EXPECT_EQ(pinned_size(0), 4096u);
  EXPECT_EQ(pinned_size(1), 4096u);
  EXPECT_EQ(pinned_size(4096), 4096u);
  EXPECT_EQ(pinned_size(4097), 8192u);               // whole pages below 16 KiB
  EXPECT_EQ(pinned_size(16 * kKiB + 1), 20 * kKiB);  // then quarters: 16 + 4
  EXPECT_EQ(pinned_size(kMiB + 1), kMiB + kMiB / 4);
  EXPECT_EQ(pinned_size(3 * kMiB), 3 * kMiB);
  for (std::size_t n : {5000u, 70000u, 123457u, 9u << 20}) {
    const std::size_t r = pinned_size(n);
    EXPECT_GE(r, n);
    EXPECT_EQ(r % 4096, 0u) << n;                               // whole pages
    EXPECT_LE(r, n + std::max<std::size_t>(4096, n / 4)) << n;  // at most a quarter wasted
  }
}

TEST(PinnedPool, FreedTensorBlocksAreReusedBySizeClass) {
  Pool pool;
  FakeState& s = *pool.runtime().s;
  void* p = pool.allocate(5000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(s.live.at(p), 8192u);
  pool.deallocate(p, 5000);
  EXPECT_EQ(s.frees, 0);  // kept: pinning again costs a system call
  EXPECT_EQ(pool.cached_bytes(), 8192u);
  EXPECT_EQ(pool.allocate(6000), p);  // same class, same block, no new pinning
  EXPECT_EQ(s.allocs, 1);
  EXPECT_EQ(pool.cached_bytes(), 0u);
  void* q = pool.allocate(9000);  // another class: a new block
  EXPECT_NE(q, p);
  EXPECT_EQ(s.allocs, 2);
  pool.deallocate(p, 6000);
  pool.deallocate(q, 9000);
  EXPECT_EQ(pool.cached_bytes(), 8192u + 12288u);
}

// A block freed while a logical CPU device's queued kernels may still read it (they hold no
// handle that keeps it) is handed out again, or freed, only once they have run: a DataLoader
// batch pinned on cpu:0 was refilled with the next batch under the step still reading it.
TEST(PinnedPool, ABlockStillReadByQueuedWorkWaitsForIt) {
  Pool pool;
  FakeState& s = *pool.runtime().s;
  void* p = pool.allocate(5000);
  auto read = std::make_shared<bool>(true);
  pool.deallocate(p, 5000, [read] { return *read; });
  EXPECT_EQ(pool.blocks_being_read(), 1u);
  EXPECT_EQ(pool.cached_bytes(), 0u);
  void* q = pool.allocate(5000);  // same class: a new block, not the one being read
  EXPECT_NE(q, p);
  EXPECT_EQ(s.allocs, 2);
  EXPECT_EQ(s.frees, 0);
  *read = false;  // the queued work has run
  EXPECT_EQ(pool.allocate(5000), p);
  EXPECT_EQ(pool.blocks_being_read(), 0u);
  // A check that is already false on deallocate keeps the block as plain deallocate does.
  pool.deallocate(q, 5000, [] { return false; });
  EXPECT_EQ(pool.blocks_being_read(), 0u);
  EXPECT_EQ(pool.cached_bytes(), 8192u);
  EXPECT_EQ(pool.allocate(5000), q);
}

TEST(PinnedPool, KeepsAtMostTheCapAndFreesTheRest) {
  Pool pool;
  FakeState& s = *pool.runtime().s;
  const std::size_t big = 600 * kMiB, rounded = pinned_size(big);  // 640 MiB
  void* a = pool.allocate(big);
  void* b = pool.allocate(big);
  pool.deallocate(a, big);
  EXPECT_EQ(pool.cached_bytes(), rounded);
  EXPECT_EQ(s.frees, 0);
  pool.deallocate(b, big);  // two would pass the 1 GiB cap: this one goes back
  EXPECT_EQ(pool.cached_bytes(), rounded);
  EXPECT_EQ(s.frees, 1);
  EXPECT_EQ(s.live.count(b), 0u);
  EXPECT_EQ(s.live.count(a), 1u);
  EXPECT_LE(pool.cached_bytes(), Pool::kMaxCached);
}

TEST(PinnedPool, RunningOutGivesKeptBlocksBackAndTriesAgain) {
  Pool pool;
  FakeState& s = *pool.runtime().s;
  s.limit = 64 * kKiB;
  void* small = pool.allocate(32 * kKiB);
  pool.deallocate(small, 32 * kKiB);
  EXPECT_EQ(pool.cached_bytes(), 32 * kKiB);
  // 48 KiB more does not fit beside the kept 32 KiB: the kept block goes, then it fits.
  void* p = pool.allocate(48 * kKiB);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(s.frees, 1);
  EXPECT_EQ(s.live.count(small), 0u);
  EXPECT_EQ(pool.cached_bytes(), 0u);
  // Nothing kept and still too big: nullptr (the caller reports out of memory), no throw.
  EXPECT_EQ(pool.allocate(32 * kKiB), nullptr);
  EXPECT_EQ(s.live.size(), 1u);
  pool.deallocate(p, 48 * kKiB);
  EXPECT_NE(pool.allocate(32 * kKiB), nullptr);  // usable again after the failure
}

TEST(PinnedPool, StagingBlocksWaitForTheCopiesThatReadThem) {
  Pool pool;
  FakeState& s = *pool.runtime().s;
  void* a = pool.acquire_staging(100, 0);
  EXPECT_EQ(s.live.at(a), Pool::kMinStaging);  // small copies share a 1 MiB block
  void* b = pool.acquire_staging(100, 0);
  EXPECT_NE(b, a);  // a is in use
  pool.release_staging(a, /*stream=*/1);
  pool.release_staging(b, /*stream=*/2);
  // Both copies are still queued: a third copy gets a new block.
  void* c = pool.acquire_staging(100, 0);
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
  EXPECT_EQ(s.allocs, 3);
  s.finish(2);  // stream 2's copy has run: b may be reused, a may not
  EXPECT_EQ(pool.acquire_staging(kMiB, 0), b);
  s.finish(1);
  void* big = pool.acquire_staging(2 * kMiB, 0);  // a is free but too small
  EXPECT_NE(big, a);
  EXPECT_EQ(s.live.at(big), 2 * kMiB);
  EXPECT_EQ(pool.acquire_staging(100, 0), a);
  EXPECT_EQ(s.allocs, 4);
  // A block released again waits for its new copy, not the old one.
  pool.release_staging(a, /*stream=*/3);
  EXPECT_NE(pool.acquire_staging(100, 0), a);
  s.finish(3);
  EXPECT_EQ(pool.acquire_staging(100, 0), a);
}

TEST(PinnedPool, AStagingBlockReusedForAnotherGpuGetsAnEventOfThatGpu) {
  Pool pool;
  FakeState& s = *pool.runtime().s;
  void* a = pool.acquire_staging(100, /*device=*/0);
  pool.release_staging(a, /*stream=*/1);
  s.finish(1);
  s.current_device = 1;  // the backend made GPU 1 current for a copy to it
  EXPECT_EQ(pool.acquire_staging(100, /*device=*/1), a);  // its copy is done: reused
  pool.release_staging(a, /*stream=*/11);                 // the fake checks the event's GPU
  ASSERT_EQ(s.events.size(), 2u);
  EXPECT_TRUE(s.events[0].destroyed) << "GPU 0's event is replaced, not leaked";
  s.current_device = 0;
  void* b = pool.acquire_staging(100, /*device=*/0);  // a's copy is still queued
  EXPECT_NE(b, a);
  pool.release_staging(b, /*stream=*/2);
  s.finish(2);
  s.finish(11);
  // Both free: a copy to GPU 0 takes GPU 0's block, and no event is made or destroyed.
  EXPECT_EQ(pool.acquire_staging(100, /*device=*/0), b);
  EXPECT_EQ(s.events.size(), 3u);
  EXPECT_FALSE(s.events[1].destroyed);
}

TEST(PinnedPool, AStagingBlockThatCannotBePinnedThrows) {
  Pool pool;
  FakeState& s = *pool.runtime().s;
  s.limit = kMiB;
  void* a = pool.acquire_staging(100, 0);
  EXPECT_THROW(pool.acquire_staging(100, 0), std::runtime_error);  // a copy needs its staging
  pool.release_staging(a, /*stream=*/1);
  s.finish(1);
  EXPECT_EQ(pool.acquire_staging(100, 0), a);  // the pool is intact
}

// Tensor blocks are freed by destructors on any thread: no block is ever handed to two
// owners at once, and every block ends either kept or freed.
TEST(PinnedPool, ConcurrentTensorBlocksHaveOneOwnerEach) {
  Pool pool;
  FakeState& s = *pool.runtime().s;
  std::mutex owners_mutex;
  std::set<void*> owned;
  bool twice = false;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 gen(t);
      std::vector<std::pair<void*, std::size_t>> mine;
      for (int i = 0; i < 2000; ++i) {
        if (mine.size() < 8 && gen() % 2 == 0) {
          const std::size_t bytes = std::size_t{1000} << (gen() % 6);
          void* p = pool.allocate(bytes);
          std::lock_guard lock(owners_mutex);
          twice |= !owned.insert(p).second;
          mine.emplace_back(p, bytes);
        } else if (!mine.empty()) {
          auto [p, bytes] = mine.back();
          mine.pop_back();
          {
            std::lock_guard lock(owners_mutex);
            owned.erase(p);
          }
          pool.deallocate(p, bytes);
        }
      }
      for (auto [p, bytes] : mine) {
        {
          std::lock_guard lock(owners_mutex);
          owned.erase(p);
        }
        pool.deallocate(p, bytes);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_FALSE(twice) << "a block was handed to two owners";
  EXPECT_EQ(s.live_bytes(), pool.cached_bytes());  // all given back: kept or freed
}

}  // namespace
}  // namespace tessera::detail
