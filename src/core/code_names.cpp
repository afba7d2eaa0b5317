// See code_names.h.
#include "core/code_names.h"

#include <fmt/format.h>

#include "core/check.h"

namespace tessera::detail {

std::string device_code(Device device) {
  if (device.is_cuda()) return fmt::format("gpu({})", device.index());
  return device.index() == 0 ? "cpu()" : fmt::format("cpu({})", device.index());
}

std::string dtype_code(Dtype dtype) {
  switch (dtype) {
    case kBool:
      return "kBool";
    case kUInt8:
      return "kUInt8";
    case kInt32:
      return "kInt32";
    case kInt64:
      return "kInt64";
    case kFloat32:
      return "kFloat32";
    case kFloat64:
      return "kFloat64";
    case kBFloat16:
      return "kBFloat16";
    case kFloat16:
      return "kFloat16";
  }
  TESSERA_INTERNAL_ASSERT(false, "unknown dtype {}", static_cast<int>(dtype));
  return {};
}

}  // namespace tessera::detail
