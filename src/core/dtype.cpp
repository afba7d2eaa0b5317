#include "tessera/dtype.h"

#include <ostream>

#include "core/check.h"
#include "core/dispatch.h"

namespace tessera {

std::string_view dtype_name(Dtype dtype) {
  switch (dtype) {
    case Dtype::kBool:
      return "bool";
    case Dtype::kUInt8:
      return "uint8";
    case Dtype::kInt32:
      return "int32";
    case Dtype::kInt64:
      return "int64";
    case Dtype::kFloat32:
      return "float32";
    case Dtype::kFloat64:
      return "float64";
    case Dtype::kBFloat16:
      return "bfloat16";
    case Dtype::kFloat16:
      return "float16";
  }
  return "unknown";
}

std::ostream& operator<<(std::ostream& os, Dtype dtype) { return os << dtype_name(dtype); }

namespace {

// bool < uint8 < int32 < int64 < {bfloat16, float16} < float32 < float64. The half types
// come last in the enum so the older values keep their numbers.
int rank(Dtype d) {
  switch (d) {
    case Dtype::kBFloat16:
    case Dtype::kFloat16:
      return 4;
    case Dtype::kFloat32:
      return 5;
    case Dtype::kFloat64:
      return 6;
    default:
      return static_cast<int>(d);
  }
}

}  // namespace

Dtype promote_types(Dtype a, Dtype b) {
  if (a == b) return a;
  if (is_half(a) && is_half(b)) return Dtype::kFloat32;
  return rank(a) < rank(b) ? b : a;
}

}  // namespace tessera

namespace tessera::detail {

void half_reached_kernel(Dtype dtype) {
  throw InternalError(fmt::format(
      "internal error: a {} tensor reached a kernel that has no {} path; its op's front end "
      "should compute it in float32. Please report this as a tessera bug.",
      dtype_name(dtype), dtype_name(dtype)));
}

}  // namespace tessera::detail
