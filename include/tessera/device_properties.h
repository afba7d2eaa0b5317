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
  /// The instructions its kernels were built for: on the CPU "x86-64", "x86-64-v3" (AVX2) or
  /// "x86-64-v4" (AVX-512), the highest the CPU runs (TESSERA_CPU_ISA=<level> picks a lower
  /// one), or "native" in a build for its machine only; on a GPU, empty.
  std::string kernel_isa;
};

/// The properties of `device`. Throws DeviceError when it does not exist. No host wait.
TESSERA_API DeviceProperties device_properties(Device device);

}  // namespace tessera
