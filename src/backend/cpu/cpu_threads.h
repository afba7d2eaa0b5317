#pragma once
// How logical CPU devices share the machine's cores. See Note [Devices own their cores].
#include <vector>

namespace tessera::detail {

// The cores this process may run on (its affinity mask), in ascending order; never empty.
std::vector<int> allowed_cores();

// Kernel threads of each of `devices` logical devices on `cores` cores: `requested` when it
// is positive, else an equal share, cores / devices, and at least 1.
int threads_per_device(int cores, int devices, int requested);

// The cores logical device `index` is pinned to: its own `threads` consecutive cores of
// `allowed`, or none (no pinning) when the devices' threads outnumber the cores, since
// shared cores are better left to the scheduler.
std::vector<int> cores_of_device(const std::vector<int>& allowed, int index, int devices,
                                 int threads);

// Makes the calling thread a device's: pins it to `cores` (none: leaves it alone) and gives
// its OpenMP regions `threads` threads. OpenMP threads it starts later inherit both.
void enter_device_thread(const std::vector<int>& cores, int threads);

}  // namespace tessera::detail
