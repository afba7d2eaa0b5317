#pragma once
// Dense rows between float32 and the half types: the chosen CPU kernel level's (F16C
// instructions where it has them, vectorized loops; Note [Half rows] in
// backend/cpu/half_rows.cpp), installed when that level's CpuBackend is made, plain loops
// until then. The CPU copy kernel converts with them, and so do the half sums of the
// collectives (logical CPU devices and MPI), which element by element were up to 15x slower
// than a float32 sum.
#include <cstdint>

#include "core/half.h"

namespace tessera::detail {

struct HalfRowConverters {
  void (*float_to_float16)(const float* in, Float16* out, std::int64_t n);
  void (*float16_to_float)(const Float16* in, float* out, std::int64_t n);
  void (*float_to_bfloat16)(const float* in, BFloat16* out, std::int64_t n);
  void (*bfloat16_to_float)(const BFloat16* in, float* out, std::int64_t n);
};

// Written once, when the CPU backend is made, before any kernel can run.
void use_half_row_converters(const HalfRowConverters& converters);
const HalfRowConverters& half_rows();

inline void rows_to_float(const Float16* in, float* out, std::int64_t n) {
  half_rows().float16_to_float(in, out, n);
}
inline void rows_to_float(const BFloat16* in, float* out, std::int64_t n) {
  half_rows().bfloat16_to_float(in, out, n);
}
inline void rows_from_float(const float* in, Float16* out, std::int64_t n) {
  half_rows().float_to_float16(in, out, n);
}
inline void rows_from_float(const float* in, BFloat16* out, std::int64_t n) {
  half_rows().float_to_bfloat16(in, out, n);
}

}  // namespace tessera::detail
