#pragma once
/// Per-device memory accounting: what tensors hold, the peak, the cache, and a limit.
#include <cstddef>
#include <cstdint>

#include "tessera/device.h"
#include "tessera/export.h"

namespace tessera {

struct TESSERA_API MemoryStats {
  std::size_t in_use = 0;         ///< Bytes held by live tensors on the device.
  std::size_t peak = 0;           ///< Highest in_use since start or reset_peak_memory().
  std::size_t reserved = 0;       ///< Bytes the allocator holds (in use plus cached blocks).
  std::size_t limit = 0;          ///< Most bytes tensors may hold; SIZE_MAX when unlimited.
  std::uint64_t allocations = 0;  ///< Tensor storage allocations made on the device.
};

/// Current statistics of `device`. Throws DeviceError if it does not exist.
TESSERA_API MemoryStats memory_stats(Device device);
/// Sets peak to the current in_use.
TESSERA_API void reset_peak_memory(Device device);
/// Caps what tensors on `device` may hold; a request past it throws OutOfMemoryError.
/// SIZE_MAX removes the cap. Existing tensors are not touched.
TESSERA_API void set_memory_limit(Device device, std::size_t bytes);
/// Returns cached, unused blocks of `device`'s allocator to the system.
TESSERA_API void empty_cache(Device device);

/// "1.50 MiB"
TESSERA_API std::string format_bytes(std::size_t bytes);

}  // namespace tessera
