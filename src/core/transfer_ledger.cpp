#include "tessera/transfer_ledger.h"

#include <ostream>

#include "core/check.h"
#include "core/device_registry.h"

namespace tessera {
namespace {

TransferStats read(const detail::DeviceCounters& c) {
  TransferStats s;
  s.h2d_count = c.h2d_count.load();
  s.h2d_bytes = c.h2d_bytes.load();
  s.d2h_count = c.d2h_count.load();
  s.d2h_bytes = c.d2h_bytes.load();
  s.d2d_count = c.d2d_count.load();
  s.d2d_bytes = c.d2d_bytes.load();
  s.host_waits = c.host_waits.load();
  return s;
}

}  // namespace

TransferStats& TransferStats::operator+=(const TransferStats& o) {
  h2d_count += o.h2d_count;
  h2d_bytes += o.h2d_bytes;
  d2h_count += o.d2h_count;
  d2h_bytes += o.d2h_bytes;
  d2d_count += o.d2d_count;
  d2d_bytes += o.d2d_bytes;
  host_waits += o.host_waits;
  return *this;
}

TransferStats transfer_stats(Device device) { return read(detail::counters(device)); }

TransferStats transfer_stats() {
  TransferStats total;
  for (int kind = 0; kind < 2; ++kind) {
    for (int i = 0; i < detail::kMaxDevicesPerKind; ++i) {
      total += read(detail::counters(Device(static_cast<DeviceKind>(kind), i)));
    }
  }
  return total;
}

void reset_transfer_stats() {
  for (int kind = 0; kind < 2; ++kind) {
    for (int i = 0; i < detail::kMaxDevicesPerKind; ++i) {
      auto& c = detail::counters(Device(static_cast<DeviceKind>(kind), i));
      c.h2d_count = c.h2d_bytes = c.d2h_count = c.d2h_bytes = 0;
      c.d2d_count = c.d2d_bytes = c.host_waits = 0;
    }
  }
}

std::ostream& operator<<(std::ostream& os, const TransferStats& s) {
  return os << "h2d " << s.h2d_count << " (" << s.h2d_bytes << " B), d2h " << s.d2h_count << " ("
            << s.d2h_bytes << " B), d2d " << s.d2d_count << " (" << s.d2d_bytes
            << " B), host waits " << s.host_waits;
}

}  // namespace tessera
