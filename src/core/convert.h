#pragma once
// One value from one dtype to another, as every CPU path converts (the CUDA kernels follow
// the same rule: kernel_utils.cuh).
#include <type_traits>

namespace tessera::detail {

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
