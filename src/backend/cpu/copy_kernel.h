#pragma once
// Strided copy with dtype conversion, on the calling thread (the caller orders it).
#include <cstdint>

#include "core/convert.h"
#include "core/half.h"
#include "tessera/tensor.h"

namespace tessera::detail {

// dst[i] = convert(src[i]) for every index; same shape, any strides and dtypes.
void copy_kernel(const Tensor& src, const Tensor& dst);

// Dense rows between float32 and the half types, the copy kernel's costliest conversions:
// the chosen kernel level's (F16C instructions where it has them, vectorized loops; Note
// [Half rows] in half_rows.cpp), installed when that level's CpuBackend is made; plain
// loops until then.
struct HalfRowConverters {
  void (*float_to_float16)(const float* in, Float16* out, std::int64_t n);
  void (*float16_to_float)(const Float16* in, float* out, std::int64_t n);
  void (*float_to_bfloat16)(const float* in, BFloat16* out, std::int64_t n);
  void (*bfloat16_to_float)(const BFloat16* in, float* out, std::int64_t n);
};
void use_half_row_converters(const HalfRowConverters& converters);

}  // namespace tessera::detail
