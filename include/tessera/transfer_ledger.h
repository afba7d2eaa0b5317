#pragma once
/// The transfer ledger: every copy between devices and every host wait, counted per device.
/// Copies are slow and should be deliberate; the ledger lets a user (and a test) prove that
/// a loop does none.
#include <cstdint>
#include <iosfwd>

#include "tessera/device.h"
#include "tessera/export.h"

namespace tessera {

struct TESSERA_API TransferStats {
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
TESSERA_API TransferStats transfer_stats(Device device);
/// Counts summed over all devices.
TESSERA_API TransferStats transfer_stats();
/// Zeroes every device's counts.
TESSERA_API void reset_transfer_stats();

TESSERA_API std::ostream& operator<<(std::ostream& os, const TransferStats& stats);

}  // namespace tessera
