#include "backend/cpu/cpu_threads.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>

// Note [Devices own their cores]
// N logical CPU devices on C cores each get C/N kernel threads, so N devices computing at
// once keep C cores busy instead of N*C threads fighting over them (and OpenMP's spinning
// turning into futex storms). A device with its own work queue runs its kernels on that
// queue's thread: the thread is pinned to the device's cores and its OpenMP team (and the
// BLAS and oneDNN calls made from it, which follow the calling thread's OpenMP thread count)
// inherit the pinning, so device i's work never lands on device j's cores. Without queues,
// kernels run on the calling thread with the device's thread count and no pinning (the
// thread is the user's). TESSERA_CPU_THREADS (or CpuDeviceOptions::threads_per_device)
// overrides the share, e.g. to compare 2 devices of 1 core with 1 device of 1 core.

namespace tessera::detail {

std::vector<int> allowed_cores() {
  std::vector<int> cores;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cores.push_back(c);
    }
  }
  if (cores.empty()) cores.push_back(0);  // unreadable mask: one core is a safe guess
  return cores;
}

int threads_per_device(int cores, int devices, int requested) {
  if (requested > 0) return requested;
  return std::max(1, cores / std::max(1, devices));
}

std::vector<int> cores_of_device(const std::vector<int>& allowed, int index, int devices,
                                 int threads) {
  const auto first = static_cast<std::size_t>(index) * static_cast<std::size_t>(threads);
  const auto needed = static_cast<std::size_t>(devices) * static_cast<std::size_t>(threads);
  if (needed > allowed.size()) return {};
  return {allowed.begin() + static_cast<std::ptrdiff_t>(first),
          allowed.begin() + static_cast<std::ptrdiff_t>(first + threads)};
}

void enter_device_thread(const std::vector<int>& cores, int threads) {
  if (!cores.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : cores) CPU_SET(c, &set);
    // Best effort: a container may forbid it, and the device still works unpinned.
    (void)pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  }
  omp_set_num_threads(threads);
}

}  // namespace tessera::detail
