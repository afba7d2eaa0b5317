#pragma once
// Strided copy with dtype conversion, on the calling thread (the caller orders it).
#include <cstdint>

#include "core/convert.h"
#include "core/half.h"
#include "core/half_rows.h"
#include "tessera/tensor.h"

namespace tessera::detail {

// dst[i] = convert(src[i]) for every index; same shape, any strides and dtypes.
void copy_kernel(const Tensor& src, const Tensor& dst);

}  // namespace tessera::detail
