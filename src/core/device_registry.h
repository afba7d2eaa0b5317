#pragma once
// The device registry: which devices exist, their per-device counters (memory accounting
// and the transfer ledger), and the logical CPU device configuration. The device rules
// that use it live in device_rules.h.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tessera/cpu_devices.h"
#include "tessera/device.h"

namespace tessera::detail {

inline constexpr int kMaxDevicesPerKind = 64;

struct DeviceCounters {
  // Memory accounting.
  std::atomic<std::size_t> in_use{0};
  std::atomic<std::size_t> peak{0};
  std::atomic<std::size_t> limit{SIZE_MAX};
  std::atomic<std::uint64_t> allocations{0};
  // Transfer ledger.
  std::atomic<std::uint64_t> h2d_count{0}, h2d_bytes{0};
  std::atomic<std::uint64_t> d2h_count{0}, d2h_bytes{0};
  std::atomic<std::uint64_t> d2d_count{0}, d2d_bytes{0};
  std::atomic<std::uint64_t> host_waits{0};
};

// Counters of a device whose kind and index are in range (checked by the caller).
DeviceCounters& counters(Device device);
// The device-to-device transfers counted so far on every device of `kind`: count and bytes
// in pairs, by device index. add_d2d_moves adds (sign 1) or takes back (-1) such a list.
std::vector<std::uint64_t> d2d_moves(DeviceKind kind);
void add_d2d_moves(DeviceKind kind, const std::vector<std::uint64_t>& moves, int sign);

// The logical CPU configuration, read from TESSERA_CPU_DEVICES / TESSERA_CPU_ASYNC on first
// use unless configure_cpu_devices() came first. Fixed after the first tensor exists.
const CpuDeviceOptions& cpu_options();
// Called whenever a tensor is created; freezes the CPU configuration.
void mark_devices_in_use();

// Whether the device is the host itself (the plain CPU with no logical devices): data there
// is read without a copy, and nothing about it is counted as a transfer.
bool is_host(Device device);

// Throws DeviceError naming `op`, the device, the devices that exist and why no other is
// seen, unless `device` exists.
void check_device(Device device, const char* op);

}  // namespace tessera::detail
