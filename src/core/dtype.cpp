#include "tessera/dtype.h"

#include <ostream>

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
  }
  return "unknown";
}

std::ostream& operator<<(std::ostream& os, Dtype dtype) { return os << dtype_name(dtype); }

// The enum is ordered by promotion rank: bool < uint8 < int32 < int64 < float32 < float64.
Dtype promote_types(Dtype a, Dtype b) { return a < b ? b : a; }

}  // namespace tessera
