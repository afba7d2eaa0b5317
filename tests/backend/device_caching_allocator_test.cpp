// The GPU caching allocator's bookkeeping (backend/device_caching_allocator.h): size
// classes, reuse, blocks that wait for side streams' events, running out of memory, empty
// caches, the memory of graph captures (the capturing thread's pool, blocks freed during a
// capture, release behind the streams in use), and a runtime error while freeing. The CUDA
// runtime is replaced by a fake that hands out addresses it never maps and events a test
// fires by hand, so all of it runs without a GPU.
#include "backend/device_caching_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace tessera::detail {
namespace {

constexpr std::size_t kKiB = 1024, kMiB = kKiB * 1024;

struct FakeState {
  std::mutex mutex;
  std::size_t limit = SIZE_MAX;  // bytes the fake device holds
  std::uintptr_t next = 1 << 20;
  std::map<void*, std::size_t> live;  // device blocks and their sizes
  int mallocs = 0, frees = 0;
  bool fail_record = false;       // record throws, as a CUDA error would
  bool fail_synchronize = false;  // try_synchronize fails too
  std::vector<int> synchronized;  // streams the host waited for
  struct Event {
    bool done = true;
    int stream = -1;
    bool in_pool = true;  // released back to the event pool
  };
  std::vector<Event> events;

  std::size_t live_bytes() const {
    std::size_t n = 0;
    for (const auto& [p, size] : live) n += size;
    return n;
  }
  void finish(int stream) {  // the work queued on `stream` has run
    std::lock_guard lock(mutex);
    for (Event& e : events) {
      if (e.stream == stream) e.done = true;
    }
  }
  int events_out() {  // acquired and not released
    std::lock_guard lock(mutex);
    int n = 0;
    for (const Event& e : events) n += e.in_pool ? 0 : 1;
    return n;
  }
};

struct FakeRuntime {
  using Event = int;
  using Stream = int;
  std::shared_ptr<FakeState> s = std::make_shared<FakeState>();

  void* try_malloc(std::size_t bytes) {
    std::lock_guard lock(s->mutex);
    if (s->live_bytes() + bytes > s->limit) return nullptr;
    void* p = reinterpret_cast<void*>(s->next);
    s->next += bytes + 4096;
    s->live[p] = bytes;
    ++s->mallocs;
    return p;
  }
  void free(void* p) {
    std::lock_guard lock(s->mutex);
    EXPECT_EQ(s->live.erase(p), 1u) << "freed a block it does not hold";
    ++s->frees;
  }
  Event acquire_event() {
    std::lock_guard lock(s->mutex);
    for (std::size_t i = 0; i < s->events.size(); ++i) {
      if (s->events[i].in_pool) {
        s->events[i].in_pool = false;
        return static_cast<int>(i);
      }
    }
    s->events.push_back({.done = true, .stream = -1, .in_pool = false});
    return static_cast<int>(s->events.size()) - 1;
  }
  void release_event(Event e) {
    std::lock_guard lock(s->mutex);
    EXPECT_FALSE(s->events[e].in_pool) << "event " << e << " released twice";
    s->events[e].in_pool = true;
  }
  void record(Event e, Stream stream) {
    std::lock_guard lock(s->mutex);
    if (s->fail_record) throw std::runtime_error("record failed");
    s->events[e].done = false;
    s->events[e].stream = stream;
  }
  bool done(Event e) {
    std::lock_guard lock(s->mutex);
    return s->events[e].done;
  }
  void synchronize(Event e) {
    std::lock_guard lock(s->mutex);
    s->events[e].done = true;  // the host waited for it
  }
  bool try_synchronize(Stream stream) {
    if (s->fail_synchronize) return false;
    s->finish(stream);
    std::lock_guard lock(s->mutex);
    s->synchronized.push_back(stream);
    return true;
  }
};

using Allocator = BasicCachingAllocator<FakeRuntime>;

struct Fixture {
  FakeRuntime runtime;
  std::shared_ptr<FakeState> state = runtime.s;
  Allocator allocator{runtime};
};

TEST(DeviceCachingAllocator, SizesRoundTo512BytesThenToQuarterPowersOfTwo) {
  EXPECT_EQ(Allocator::round_size(1), 512u);
  EXPECT_EQ(Allocator::round_size(512), 512u);
  EXPECT_EQ(Allocator::round_size(513), 1024u);
  EXPECT_EQ(Allocator::round_size(kMiB), kMiB);
  EXPECT_EQ(Allocator::round_size(kMiB + 1), kMiB + 256 * kKiB);
  EXPECT_EQ(Allocator::round_size(3 * kMiB), 3 * kMiB);
  EXPECT_EQ(Allocator::round_size(7 * kMiB + 1), 8 * kMiB);
  // Never more than a quarter wasted above 1 MiB.
  for (std::size_t b = kMiB + 1; b < 64 * kMiB; b = b * 9 / 7) {
    EXPECT_GE(Allocator::round_size(b), b);
    EXPECT_LE(Allocator::round_size(b), b + b / 4) << b;
  }
}

TEST(DeviceCachingAllocator, AFreedBlockIsReusedForItsSizeClassWithoutTheRuntime) {
  Fixture f;
  void* a = f.allocator.allocate(1000);
  EXPECT_EQ(f.state->live.at(a), 1024u);
  f.allocator.deallocate(a, 1000);
  EXPECT_EQ(f.allocator.cached(), 1024u);
  EXPECT_EQ(f.allocator.allocate(700), a);  // same class: 1024
  EXPECT_EQ(f.allocator.cached(), 0u);
  void* b = f.allocator.allocate(2000);  // another class: new memory
  EXPECT_NE(b, a);
  EXPECT_EQ(f.state->mallocs, 2);
  EXPECT_EQ(f.state->frees, 0);
  EXPECT_EQ(f.allocator.reserved(), 1024u + 2048u);
}

TEST(DeviceCachingAllocator, ABlockSideStreamsStillUseWaitsForTheirEvents) {
  Fixture f;
  void* a = f.allocator.allocate(4096);
  const std::vector<int> in_use{1, 2};
  f.allocator.deallocate(a, 4096, in_use);
  EXPECT_EQ(f.state->events_out(), 2);
  EXPECT_EQ(f.allocator.cached(), 0u);
  void* b = f.allocator.allocate(4096);  // neither stream is done: new memory
  EXPECT_NE(b, a);
  f.state->finish(1);
  void* c = f.allocator.allocate(4096);  // stream 2 still is not
  EXPECT_NE(c, a);
  f.state->finish(2);
  EXPECT_EQ(f.allocator.allocate(4096), a);
  EXPECT_EQ(f.state->events_out(), 0) << "the events go back to the pool";
}

// Freeing runs in tensor destructors: a runtime error there must not throw.
TEST(DeviceCachingAllocator, AFailedEventRecordWaitsForTheStreamsInsteadOfThrowing) {
  Fixture f;
  void* a = f.allocator.allocate(4096);
  void* b = f.allocator.allocate(4096);
  f.state->fail_record = true;
  const std::vector<int> in_use{1, 2};
  EXPECT_NO_THROW(f.allocator.deallocate(a, 4096, in_use));
  EXPECT_EQ(f.state->synchronized, in_use);
  EXPECT_EQ(f.state->events_out(), 0) << "the events go back to the pool";
  EXPECT_EQ(f.allocator.cached(), 4096u) << "both streams are done with it: cached";
  f.state->fail_synchronize = true;  // the device is broken: the block is never reused
  EXPECT_NO_THROW(f.allocator.deallocate(b, 4096, in_use));
  EXPECT_EQ(f.allocator.cached(), 4096u);
  EXPECT_EQ(f.allocator.allocate(4096), a);
  EXPECT_NE(f.allocator.allocate(4096), b);
}

TEST(DeviceCachingAllocator, RunningOutIsNullNotAnError) {
  Fixture f;
  f.state->limit = 3 * kMiB;
  void* a = f.allocator.allocate(2 * kMiB);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(f.allocator.allocate(2 * kMiB), nullptr);
  // The front end then returns the cache and tries again (Storage, core/memory.cpp).
  f.allocator.deallocate(a, 2 * kMiB);
  EXPECT_EQ(f.allocator.allocate(kMiB + kMiB / 2), nullptr) << "the cached block is another class";
  f.allocator.empty_cache();
  EXPECT_EQ(f.allocator.reserved(), 0u);
  EXPECT_NE(f.allocator.allocate(2 * kMiB + kMiB / 2), nullptr);
}

TEST(DeviceCachingAllocator, EmptyCacheWaitsForPendingBlocksAndFreesEverything) {
  Fixture f;
  void* a = f.allocator.allocate(kMiB);
  void* b = f.allocator.allocate(8 * kMiB);
  void* kept = f.allocator.allocate(512);
  f.allocator.deallocate(a, kMiB);
  const std::vector<int> in_use{3};
  f.allocator.deallocate(b, 8 * kMiB, in_use);
  EXPECT_EQ(f.allocator.largest_cached_block(), kMiB) << "b still waits";
  f.allocator.empty_cache();
  EXPECT_EQ(f.state->frees, 2);
  EXPECT_EQ(f.state->live.size(), 1u);
  EXPECT_EQ(f.state->live.count(kept), 1u) << "a block still in use stays";
  EXPECT_EQ(f.allocator.reserved(), 512u);
  EXPECT_EQ(f.allocator.cached(), 0u);
  EXPECT_EQ(f.allocator.largest_cached_block(), 0u);
  EXPECT_EQ(f.state->events_out(), 0);
}

TEST(DeviceCachingAllocator, ACaptureTakesNothingFromTheCacheAndKeepsWhatItFrees) {
  Fixture f;
  void* before = f.allocator.allocate(4096);
  void* cached = f.allocator.allocate(4096);
  f.allocator.deallocate(cached, 4096);
  auto pool = std::make_shared<GraphPool>();
  f.allocator.begin_capture(pool);
  void* t1 = f.allocator.allocate(4096);
  EXPECT_NE(t1, cached) << "cached blocks may be written by work outside the graph";
  f.allocator.deallocate(t1, 4096);  // a temporary of the captured code
  EXPECT_EQ(f.allocator.allocate(4096), t1) << "reused within the capture, in recorded order";
  f.allocator.deallocate(before, 4096);  // made before the capture: replays may read it
  f.allocator.end_capture();
  EXPECT_EQ(pool->owned, std::vector<void*>{t1});
  ASSERT_EQ(pool->kept.size(), 1u);
  EXPECT_EQ(pool->kept[0].first, before);
  // After the capture, the graph's block is still the graph's when its tensor goes.
  f.allocator.deallocate(t1, 4096);
  EXPECT_EQ(f.allocator.allocate(4096), cached);
  void* fresh = f.allocator.allocate(4096);
  EXPECT_NE(fresh, t1);
  EXPECT_NE(fresh, before);
  // Destroying the graph gives both back.
  f.allocator.release(pool);
  EXPECT_EQ(f.allocator.cached(), 2 * 4096u);
  std::vector<void*> again{f.allocator.allocate(4096), f.allocator.allocate(4096)};
  EXPECT_EQ((std::set<void*>(again.begin(), again.end())), (std::set<void*>{t1, before}));
}

TEST(DeviceCachingAllocator, AnotherThreadDuringACaptureGetsNoneOfTheGraphsBlocks) {
  Fixture f;
  auto pool = std::make_shared<GraphPool>();
  f.allocator.begin_capture(pool);
  void* temp = f.allocator.allocate(4096);
  f.allocator.deallocate(temp, 4096);  // free for the capture's next request
  void* other = nullptr;
  std::thread([&] { other = f.allocator.allocate(4096); }).join();
  EXPECT_NE(other, temp) << "a replay would overwrite another thread's tensor";
  EXPECT_EQ(f.allocator.allocate(4096), temp);
  f.allocator.end_capture();
  EXPECT_EQ(pool->owned, std::vector<void*>{temp}) << "the other thread's block is not the graph's";
}

// A replay may still run on the streams in use when the graph is destroyed.
TEST(DeviceCachingAllocator, ADestroyedGraphsBlocksWaitForTheStreamsInUse) {
  Fixture f;
  void* before = f.allocator.allocate(4096);
  auto pool = std::make_shared<GraphPool>();
  f.allocator.begin_capture(pool);
  void* temp = f.allocator.allocate(8192);
  f.allocator.deallocate(temp, 8192);    // the graph's, free within it
  f.allocator.deallocate(before, 4096);  // kept: replays may read it
  f.allocator.end_capture();
  const std::vector<int> in_use{0, 1};
  f.allocator.release(pool, in_use);
  EXPECT_EQ(f.allocator.cached(), 0u);
  EXPECT_EQ(f.state->events_out(), 2) << "one event per stream for all the graph's blocks";
  EXPECT_NE(f.allocator.allocate(8192), temp);
  f.state->finish(0);
  EXPECT_NE(f.allocator.allocate(4096), before) << "stream 1 may still run a replay";
  f.state->finish(1);
  EXPECT_EQ(f.allocator.allocate(8192), temp);
  EXPECT_EQ(f.allocator.allocate(4096), before);
  EXPECT_EQ(f.state->events_out(), 0);
}

TEST(DeviceCachingAllocator, AGraphsBlockStillHeldAfterReleaseGoesToTheCacheWhenFreed) {
  Fixture f;
  auto pool = std::make_shared<GraphPool>();
  f.allocator.begin_capture(pool);
  void* out = f.allocator.allocate(kMiB);  // e.g. a graph output the user keeps
  f.allocator.end_capture();
  f.allocator.release(pool);
  EXPECT_EQ(f.allocator.cached(), 0u);
  f.allocator.deallocate(out, kMiB);
  EXPECT_EQ(f.allocator.cached(), kMiB);
  EXPECT_TRUE(pool->owned.empty());
}

}  // namespace
}  // namespace tessera::detail
