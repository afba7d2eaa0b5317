#pragma once
// A CPU kernel's typed view of a tensor's memory.
#include "core/tensor_impl.h"

namespace tessera::detail {

// The first element of t as T*, or nullptr for an undefined tensor (an optional operand: a
// layer without bias). The caller has dispatched on t's dtype.
template <typename T>
T* data_of(const Tensor& t) {
  return t.defined() ? reinterpret_cast<T*>(impl_of(t).data()) : nullptr;
}

}  // namespace tessera::detail
