// The CPU caching allocator (Note [CPU caching allocator]) and its free lists.
#include "backend/cpu/cpu_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>

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

}  // namespace
}  // namespace tessera::detail
