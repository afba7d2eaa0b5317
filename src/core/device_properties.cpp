#include "tessera/device_properties.h"

#include "backend/backend.h"
#include "core/device_registry.h"

namespace tessera {

DeviceProperties device_properties(Device device) {
  detail::check_device(device, "device_properties");
  detail::Backend& backend = detail::backend_of(device);
  const detail::DeviceInfo info = backend.info(device.index());
  return {info.name,
          info.total_memory,
          info.cores,
          info.details,
          backend.memory_report(device.index()),
          info.kernel_isa};
}

}  // namespace tessera
