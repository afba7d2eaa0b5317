// Storage allocation and per-device memory accounting. See Note [Memory accounting].
#include "tessera/memory.h"

#include <fmt/format.h>

#include <optional>

#include "backend/backend.h"
#include "core/check.h"
#include "core/code_names.h"
#include "core/device_registry.h"
#include "core/device_rules.h"
#include "core/tensor_impl.h"

// Note [Memory accounting]
// in_use counts the bytes tensors asked for on each device (not the allocator's rounded
// block sizes), so a test can assert exactly what an op allocated. The limit applies to
// in_use; the backend's cache (reserved - in_use) is reclaimed before an allocation fails.

namespace tessera {

std::string format_bytes(std::size_t bytes) {
  if (bytes == SIZE_MAX) return "unlimited";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 6) {
    value /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", value, units[unit]);
}

}  // namespace tessera

namespace tessera::detail {
namespace {

// `in_use`: the bytes in use that the request was measured against (other threads may
// allocate and free meanwhile: a count read again could contradict `why`); by default, now.
// `over_limit`: the limit refused it (not the device), so raising the limit is a fix.
[[noreturn]] void throw_oom(Device device, std::size_t bytes, const char* op, const char* why,
                            bool over_limit, std::optional<std::size_t> in_use = std::nullopt) {
  const DeviceCounters& c = counters(device);
  const std::string report = backend_of(device).memory_report(device.index());
  throw OutOfMemoryError(fmt::format(
      "[{}] out of memory on {}: tried to allocate {} ({} bytes); {} in use, limit {}, {}{}{}. "
      "Free tensors you no longer need{}.",
      op, device.str(), format_bytes(bytes), bytes, format_bytes(in_use.value_or(c.in_use.load())),
      format_bytes(c.limit.load()), why, report.empty() ? "" : "; ", report,
      over_limit ? fmt::format(", use smaller batches, or raise the limit with "
                               "set_memory_limit({}, bytes)",
                               device_code(device))
                 : " or use smaller batches"));
}

}  // namespace

Storage::Storage(Device device_in, std::size_t bytes_in, const char* op, bool pinned_in,
                 FirstWriter first)
    : bytes(bytes_in), device(device_in), pinned(pinned_in) {
  DeviceCounters& c = counters(device);
  // No device holds 2^62 bytes; past that, the allocators' size classes (bytes + step - 1)
  // and in_use + bytes wrapped around 2^64: a request of 2^64 - 4 bytes got a 0-byte block.
  constexpr std::size_t kMostAnyDeviceHolds = std::size_t{1} << 62;
  if (bytes > kMostAnyDeviceHolds) {
    throw_oom(device, bytes, op, "no device holds 2^62 bytes or more", false);
  }
  const std::size_t limit = c.limit.load(std::memory_order_relaxed);
  if (bytes > limit) throw_oom(device, bytes, op, "the request alone exceeds the limit", true);
  // Counted only if it fits (an add undone after the check made another thread's request
  // that did fit fail meanwhile).
  std::size_t before = c.in_use.load(std::memory_order_relaxed);
  do {
    if (bytes > 0 && before + bytes > limit) {  // nothing cannot pass a limit
      throw_oom(device, bytes, op, "the request does not fit under the limit", true, before);
    }
  } while (!c.in_use.compare_exchange_weak(before, before + bytes));
  if (bytes > 0 && pinned) {
    data = cuda_backend()->allocate_pinned(bytes);
    if (data == nullptr) {
      c.in_use.fetch_sub(bytes);
      throw_oom(device, bytes, op, "no page-locked host memory is left for it", false);
    }
  } else if (bytes > 0) {
    Backend& backend = backend_of(device);
    data = backend.allocate(device.index(), bytes, first);
    if (data == nullptr && !backend.capturing(device.index())) {
      // Return the cache to the device and retry once before giving up (never while
      // capturing a graph: freeing device memory waits for the device).
      backend.empty_cache(device.index());
      data = backend.allocate(device.index(), bytes, first);
    }
    if (data == nullptr) {
      c.in_use.fetch_sub(bytes);
      throw_oom(device, bytes, op, "the device has no memory left for it", false);
    }
  }
  c.allocations.fetch_add(1, std::memory_order_relaxed);
  const std::size_t now = before + bytes;
  std::size_t peak = c.peak.load(std::memory_order_relaxed);
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
}

Storage::~Storage() {
  if (borrowed) return;
  if (data != nullptr && pinned) {
    // Kernels queued on a logical CPU device read the block without keeping it (Note
    // [Memory freed in queue order]): it is handed out again only after them.
    Backend::StillRead still_read;
    try {
      still_read = backend_of(device).queued_readers(device.index());
    } catch (...) {
      // No memory for the check: keeping the block forever is safe, handing it out is not.
      counters(device).in_use.fetch_sub(bytes);
      return;
    }
    cuda_backend()->deallocate_pinned(data, bytes, std::move(still_read));
  } else if (data != nullptr) {
    backend_of(device).deallocate(device.index(), data, bytes);
  }
  counters(device).in_use.fetch_sub(bytes);
}

}  // namespace tessera::detail

namespace tessera {

MemoryStats memory_stats(Device device) {
  detail::check_device(device, "memory_stats");
  const detail::DeviceCounters& c = detail::counters(device);
  MemoryStats stats;
  stats.in_use = c.in_use.load();
  stats.peak = c.peak.load();
  stats.limit = c.limit.load();
  stats.allocations = c.allocations.load();
  stats.reserved = detail::backend_of(device).reserved(device.index());
  return stats;
}

void reset_peak_memory(Device device) {
  detail::check_device(device, "reset_peak_memory");
  detail::DeviceCounters& c = detail::counters(device);
  c.peak.store(c.in_use.load());
}

void set_memory_limit(Device device, std::size_t bytes) {
  detail::check_device(device, "set_memory_limit");
  detail::counters(device).limit.store(bytes);
}

void empty_cache(Device device) {
  detail::check_device(device, "empty_cache");
  detail::check_not_capturing(device, "empty_cache", "returning memory to the driver");
  detail::backend_of(device).empty_cache(device.index());
}

}  // namespace tessera
