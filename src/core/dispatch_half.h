#pragma once
// dispatch_dtype with the half types as well (BFloat16, Float16 from core/half.h), for the
// code that converts between dtypes on the host: copies, reads, printing.
#include "core/dispatch.h"
#include "core/half.h"

namespace tessera::detail {

template <typename F>
decltype(auto) dispatch_dtype_with_half(Dtype dtype, F&& f) {
  if (dtype == Dtype::kBFloat16) return f(TypeTag<BFloat16>{});
  if (dtype == Dtype::kFloat16) return f(TypeTag<Float16>{});
  return dispatch_dtype(dtype, f);
}

}  // namespace tessera::detail
