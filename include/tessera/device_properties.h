#pragma once
/// What a device is: its name, memory and cores, as `tessera info` prints them.
#include <cstddef>
#include <string>

#include "tessera/device.h"
#include "tessera/export.h"

namespace tessera {

struct TESSERA_API DeviceProperties {
  std::string name;              ///< "Intel(R) Xeon(R) ...", "NVIDIA H100 80GB HBM3"
  std::size_t total_memory = 0;  ///< bytes
  int cores = 0;                 ///< CPU cores, or GPU multiprocessors
  std::string details;           ///< extra lines (PCI bus id, driver, a logical device's share)
  std::string memory_report;     ///< the driver's free/total and the cache, when known
};

/// The properties of `device`. Throws DeviceError when it does not exist. No host wait.
TESSERA_API DeviceProperties device_properties(Device device);

}  // namespace tessera
