#pragma once
/// The thread-local default device, the C++ form of TensorFlow's `with tf.device(...)`.
#include "tessera/device.h"
#include "tessera/export.h"

namespace tessera {

/// The device factories use when none is given: the innermost DeviceScope on this thread,
/// else the CPU.
TESSERA_API Device default_device();

/// RAII scope: while alive, factories on this thread without an explicit device create
/// their tensors on `device`. Scopes nest; destruction restores the previous default.
/// Does not check that the device exists: the first factory that uses it does.
class TESSERA_API DeviceScope {
 public:
  explicit DeviceScope(Device device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  Device previous_;
};

}  // namespace tessera
