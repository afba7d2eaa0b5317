#pragma once
// A lock for critical sections of a few dozen instructions that two threads hit all the
// time (an allocator's free lists: the host allocates, a device queue frees). std::mutex
// puts the loser to sleep with a futex and the winner wakes it with another; for sections
// this short, spinning is far cheaper. Yields after a while in case the holder was
// descheduled (more threads than cores).
#include <atomic>
#include <thread>

namespace tessera::detail {

class SpinLock {
 public:
  void lock() {
    for (int spins = 0; flag_.exchange(true, std::memory_order_acquire); ++spins) {
      while (flag_.load(std::memory_order_relaxed)) {
        if (++spins > 64) {
          std::this_thread::yield();
        } else {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
        }
      }
    }
  }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

}  // namespace tessera::detail
