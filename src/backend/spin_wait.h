#pragma once
// Waiting a little by spinning before sleeping. A thread that waits for another a few
// microseconds ahead or behind (a work queue's next task, a host waiting for a ticket, the
// devices of a collective meeting) loses more to a futex sleep and the wake-up than the wait
// itself: the syscalls, the context switches and the scheduler's delay, tens of
// microseconds on the VMs we measure on.
#include <atomic>
#include <chrono>
#include <cstdint>

namespace tessera::detail {

// How long a waiter polls before it sleeps.
inline constexpr auto kSpin = std::chrono::microseconds(50);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polls `done` until it holds or kSpin has passed; returns whether it holds.
template <typename Done>
bool spin_until(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (done()) return true;
    cpu_relax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return done();
  }
}

// k threads meet, again and again (a recorded collective's tasks meet at every replay):
// each arrives and returns when all k have. The last to arrive releases the others; they
// spin for kSpin (the others are usually close behind) and then sleep on the phase
// (std::atomic::wait). std::barrier spins only a few hundred cycles before its futex, so two
// logical devices meeting at every collective slept and woke each other a few times per
// training step.
class Rendezvous {
 public:
  explicit Rendezvous(int count) : count_(count), remaining_(count) {}
  void arrive_and_wait() {
    const std::uint32_t phase = phase_.load(std::memory_order_acquire);
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Reset before the release, so whoever sees the next phase finds a full count.
      remaining_.store(count_, std::memory_order_relaxed);
      phase_.fetch_add(1, std::memory_order_release);
      phase_.notify_all();
      return;
    }
    if (spin_until([&] { return phase_.load(std::memory_order_acquire) != phase; })) return;
    while (phase_.load(std::memory_order_acquire) == phase) {
      phase_.wait(phase, std::memory_order_acquire);
    }
  }

 private:
  const int count_;
  std::atomic<int> remaining_;
  std::atomic<std::uint32_t> phase_{0};
};

}  // namespace tessera::detail
