#pragma once
// Calls a generic lambda with a tag whose `type` is the C++ type of a dtype, so a kernel is
// written once as a template and instantiated per dtype.
#include <cstdint>
#include <type_traits>

#include "tessera/dtype.h"

namespace tessera::detail {

template <typename T>
struct TypeTag {
  using type = T;
};

template <typename F>
decltype(auto) dispatch_dtype(Dtype dtype, F&& f) {
  switch (dtype) {
    case Dtype::kBool:
      return f(TypeTag<bool>{});
    case Dtype::kUInt8:
      return f(TypeTag<std::uint8_t>{});
    case Dtype::kInt32:
      return f(TypeTag<std::int32_t>{});
    case Dtype::kInt64:
      return f(TypeTag<std::int64_t>{});
    case Dtype::kFloat32:
      return f(TypeTag<float>{});
    case Dtype::kFloat64:
      return f(TypeTag<double>{});
  }
  return f(TypeTag<float>{});
}

template <typename F>
decltype(auto) dispatch_floating(Dtype dtype, F&& f) {
  if (dtype == Dtype::kFloat64) return f(TypeTag<double>{});
  return f(TypeTag<float>{});
}

}  // namespace tessera::detail
