// The CPU caching allocator (Note [CPU caching allocator]) and its free lists.
#include "backend/cpu/cpu_allocator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <thread>

#include "backend/cpu/work_queue.h"

namespace tessera::detail {
namespace {

TEST(CpuAllocator, SizesRoundToQuarterPowerOfTwoClasses) {
  EXPECT_EQ(CpuAllocator::round_size(1), 64u);
  EXPECT_EQ(CpuAllocator::round_size(64), 64u);
  EXPECT_EQ(CpuAllocator::round_size(65), 128u);
  EXPECT_EQ(CpuAllocator::round_size(256), 256u);
  EXPECT_EQ(CpuAllocator::round_size(257), 320u);    // 256 + 64
  EXPECT_EQ(CpuAllocator::round_size(1000), 1024u);  // 896 < 1000 <= 1024
  EXPECT_EQ(CpuAllocator::round_size(1025), 1280u);
  for (std::size_t n : {300u, 5000u, 123457u, 3u << 20}) {
    const std::size_t r = CpuAllocator::round_size(n);
    EXPECT_GE(r, n);
    EXPECT_LE(r, n + n / 4 + 64) << n;  // at most a quarter wasted
  }
}

TEST(CpuAllocator, FreedBlocksAreReusedAndAccounted) {
  CpuAllocator a;
  void* p = a.allocate(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u);  // aligned for vector loads
  EXPECT_EQ(a.reserved(), 1024u);
  EXPECT_EQ(a.cached(), 0u);
  a.deallocate(p, 1000);
  EXPECT_EQ(a.reserved(), 1024u);  // kept, not returned to the system
  EXPECT_EQ(a.cached(), 1024u);
  EXPECT_EQ(a.largest_cached_block(), 1024u);
  void* q = a.allocate(900);  // same class: the same block comes back
  EXPECT_EQ(q, p);
  EXPECT_EQ(a.cached(), 0u);
  void* big = a.allocate(std::size_t{3} << 20);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(big) % (std::size_t{2} << 20), 0u);  // huge pages
  a.deallocate(big, std::size_t{3} << 20);
  a.deallocate(q, 900);
  EXPECT_EQ(a.largest_cached_block(), std::size_t{3} << 20);
  a.empty_cache();
  EXPECT_EQ(a.reserved(), 0u);
  EXPECT_EQ(a.cached(), 0u);
  EXPECT_EQ(a.largest_cached_block(), 0u);
}

TEST(CpuAllocator, AnImpossibleRequestReturnsNull) {
  CpuAllocator a;
  EXPECT_EQ(a.allocate(SIZE_MAX / 2), nullptr);  // the front end turns this into OutOfMemoryError
  EXPECT_EQ(a.reserved(), 0u);
}

// A queue held by its first task until release() (Note [Memory freed in queue order]).
class HeldQueue {
 public:
  HeldQueue() : gate_(go_.get_future().share()) {
    queue.submit([gate = gate_] { gate.wait(); });
  }
  ~HeldQueue() { release(); }
  void release() {
    if (released_) return;
    released_ = true;
    go_.set_value();
    queue.synchronize();
  }
  WorkQueue queue;

 private:
  std::promise<void> go_;
  std::shared_future<void> gate_;
  bool released_ = false;
};

TEST(CpuAllocator, ABlockQueuedWorkStillUsesComesBackOnlyBehindThatWork) {
  HeldQueue held, other;
  CpuAllocator a;
  void* p = a.allocate(1000);
  QueueUses uses;
  uses.add(&held.queue);  // its task (ticket 1) has not run
  ASSERT_EQ(uses.count, 1);
  a.deallocate(p, 1000, uses);
  EXPECT_EQ(a.reserved(), 1024u);
  EXPECT_EQ(a.cached(), 1024u) << "a freed block counts as cached while its uses are queued";
  void* anywhere = a.allocate(1000);  // the host may write this one directly
  EXPECT_NE(anywhere, p) << "a block the held task may still use went to the host";
  void* elsewhere = a.allocate(1000, &other.queue);
  EXPECT_NE(elsewhere, p) << "a block the held task may still use went to work on another queue";
  void* behind = a.allocate(1000, &held.queue);
  EXPECT_EQ(behind, p) << "work queued behind the held task should reuse the block";
  EXPECT_EQ(a.reserved(), 3 * 1024u);
  a.deallocate(anywhere, 1000);
  a.deallocate(elsewhere, 1000);
  a.deallocate(behind, 1000);
  a.empty_cache();
  EXPECT_EQ(a.reserved(), 0u);
}

TEST(CpuAllocator, ABlockUsedOnTwoQueuesWaitsForTheOtherOne) {
  HeldQueue first, second;
  CpuAllocator a;
  void* p = a.allocate(5000);
  QueueUses uses;
  uses.add(&first.queue);
  uses.add(&second.queue);
  a.deallocate(p, 5000, uses);
  void* q = a.allocate(5000, &first.queue);
  EXPECT_NE(q, p) << "work on the first queue could run before the second queue's use";
  second.release();
  void* r = a.allocate(5000, &first.queue);
  EXPECT_EQ(r, p) << "only the first queue's use is left, and the new work queues behind it";
  a.deallocate(q, 5000);
  a.deallocate(r, 5000);
  a.empty_cache();
  EXPECT_EQ(a.reserved(), 0u);
}

TEST(CpuAllocator, UsesThatHaveRunAreDroppedAndTheBlockIsFreeForAnyone) {
  HeldQueue held;
  held.release();  // ticket 1 has run
  QueueUses uses;
  uses.add(&held.queue);
  EXPECT_EQ(uses.count, 0);
  CpuAllocator a;
  void* p = a.allocate(1000);
  a.deallocate(p, 1000, uses);
  EXPECT_EQ(a.allocate(1000), p);
  a.deallocate(p, 1000);
  a.empty_cache();
}

TEST(CpuAllocator, APendingBlockOfASizeNobodyFreesAgainIsRetiredByTheNextNewBlock) {
  HeldQueue held;
  CpuAllocator a(/*max_cached=*/0);  // no room in the cache: a retired block is freed
  void* p = a.allocate(1000);
  QueueUses uses;
  uses.add(&held.queue);
  a.deallocate(p, 1000, uses);
  EXPECT_EQ(a.reserved(), 1024u) << "a block with a queued use is kept, whatever the cap";
  held.release();
  // No block of 1024 bytes is freed or asked for again: the next fresh block of another
  // size finds the pending one over and returns it.
  void* q = a.allocate(std::size_t{1} << 20);
  EXPECT_EQ(a.reserved(), std::size_t{1} << 20) << "the pending 1 KiB block was not retired";
  EXPECT_EQ(a.cached(), 0u);
  a.deallocate(q, std::size_t{1} << 20);
  EXPECT_EQ(a.reserved(), 0u) << "a cap of 0 caches nothing";
}

TEST(CpuAllocator, EmptyCacheWaitsForQueuedUsesAndThenFreesTheBlock) {
  HeldQueue held;
  CpuAllocator a;
  void* p = a.allocate(std::size_t{3} << 20);
  QueueUses uses;
  uses.add(&held.queue);
  a.deallocate(p, std::size_t{3} << 20, uses);
  EXPECT_EQ(a.largest_cached_block(), std::size_t{3} << 20);
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    held.release();
  });
  a.empty_cache();  // returns once the held task has run
  EXPECT_TRUE(held.queue.done(1));
  EXPECT_EQ(a.reserved(), 0u);
  EXPECT_EQ(a.cached(), 0u);
  releaser.join();
}

}  // namespace
}  // namespace tessera::detail
