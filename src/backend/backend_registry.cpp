#include "backend/backend.h"
#include "core/check.h"

namespace tessera::detail {

Backend* backend_for(DeviceKind kind) {
  return kind == DeviceKind::kCpu ? &cpu_backend() : cuda_backend();
}

Backend& backend_of(Device device) {
  Backend* backend = backend_for(device.kind());
  TESSERA_INTERNAL_ASSERT(backend != nullptr, "no backend for {}", device.str());
  return *backend;
}

}  // namespace tessera::detail
