#pragma once
// Strided copy with dtype conversion, on the calling thread (the caller orders it).
#include "tessera/tensor.h"

namespace tessera::detail {

// dst[i] = convert(src[i]) for every index; same shape, any strides and dtypes.
void copy_kernel(const Tensor& src, const Tensor& dst);

// Converts one value, with bool meaning "non-zero".
template <typename To, typename From>
inline To convert_value(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace tessera::detail
