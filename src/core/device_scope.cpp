#include "tessera/device_scope.h"

namespace tessera {
namespace {
thread_local Device t_default_device = Device();
}

Device default_device() { return t_default_device; }

DeviceScope::DeviceScope(Device device) : previous_(t_default_device) { t_default_device = device; }

DeviceScope::~DeviceScope() { t_default_device = previous_; }

}  // namespace tessera
