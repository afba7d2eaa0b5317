#pragma once
/// The transfer ledger: every copy between devices and every host wait, counted per device.
/// Copies are slow and should be deliberate; the ledger lets a user (and a test) prove that
/// a loop does none.
#include <cstdint>
#include <iosfwd>

#include "tessera/device.h"

namespace tessera {

struct TransferStats {
  std::uint64_t h2d_count = 0;  ///< Host-to-device copies into this device.
  std::uint64_t h2d_bytes = 0;
  std::uint64_t d2h_count = 0;  ///< Device-to-host copies out of this device.
  std::uint64_t d2h_bytes = 0;
  std::uint64_t d2d_count = 0;  ///< Copies from another device into this one.
  std::uint64_t d2d_bytes = 0;
  std::uint64_t host_waits = 0;  ///< Times the host blocked until this device caught up.

  std::uint64_t copies() const { return h2d_count + d2h_count + d2d_count; }
  TransferStats& operator+=(const TransferStats& other);
  friend bool operator==(const TransferStats&, const TransferStats&) = default;
};

/// Counts for one device (zero for a device that never transferred).
TransferStats transfer_stats(Device device);
/// Counts summed over all devices.
TransferStats transfer_stats();
/// Zeroes every device's counts.
void reset_transfer_stats();

std::ostream& operator<<(std::ostream& os, const TransferStats& stats);

}  // namespace tessera
