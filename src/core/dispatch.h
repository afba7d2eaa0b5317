#pragma once
// Calls a generic lambda with a tag whose `type` is the C++ type of a dtype, so a kernel is
// written once as a template and instantiated per dtype. The kernels see no half types:
// the op front ends compute bfloat16 and float16 in float32 (Note [Half precision] in
// ops/half_compute.h), so dispatch_dtype and dispatch_floating refuse them as a tessera bug.
// Conversions (copies, reads to the host, printing) use dispatch_dtype_with_half.
#include <cstdint>
#include <type_traits>

#include "tessera/dtype.h"

namespace tessera::detail {

template <typename T>
struct TypeTag {
  using type = T;
};

// Throws InternalError: a half dtype reached a kernel that computes in its own type.
[[noreturn]] void half_reached_kernel(Dtype dtype);

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
    case Dtype::kBFloat16:
    case Dtype::kFloat16:
      half_reached_kernel(dtype);
  }
  return f(TypeTag<float>{});
}

template <typename F>
decltype(auto) dispatch_floating(Dtype dtype, F&& f) {
  if (dtype == Dtype::kFloat64) return f(TypeTag<double>{});
  if (is_half(dtype)) half_reached_kernel(dtype);
  return f(TypeTag<float>{});
}

}  // namespace tessera::detail
