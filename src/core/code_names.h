#pragma once
// How C++ code names a device or a dtype, for the fixes that error messages suggest:
// "move it with .to(cpu(1))", "convert it with .to(kFloat32)". Device::str() ("cpu:1") and
// dtype_name() ("float32") are for reading, not for pasting into code.
#include <string>

#include "tessera/device.h"
#include "tessera/dtype.h"

namespace tessera::detail {

// "cpu()", "cpu(1)", "gpu(0)".
std::string device_code(Device device);
// "kFloat32", "kBFloat16", "kBool".
std::string dtype_code(Dtype dtype);

}  // namespace tessera::detail
