// Dense float32 <-> half rows (core/half_rows.h) for the CPU copy kernel and the half sums of
// the collectives, built once per kernel level.
#include "backend/cpu/copy_kernel.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/half_convert.h"

// Note [Half rows]
// float16 steps on the CPU convert every operand (autocast's casts, the widened matmul's
// copies), and the copy kernel's element-by-element conversion, which the compiler does not
// vectorize at the baseline level, was 37% of a float16 MLP epoch. The levels with F16C
// (x86-64-v3 and v4) convert 8 or 16 values per instruction. Their rounding is the same
// round-to-nearest-even as float_to_float16_bits (with MXCSR's default rounding and no
// denormals-are-zero, which tessera never sets), subnormals and overflow included; a NaN comes
// back quiet from vcvtph2ps, so float16_bits_to_float quiets NaNs too, and the two give the
// same bits for every input (tests/core/half_rows_test.cpp, at every level).

namespace tessera::detail::TESSERA_CPU_ISA {
namespace {

// Out of line, once per level, for the function-pointer table.
void float_to_float16(const float* in, Float16* out, std::int64_t n) { float_to_half(in, out, n); }
void float16_to_float(const Float16* in, float* out, std::int64_t n) { half_to_float(in, out, n); }
void float_to_bfloat16(const float* in, BFloat16* out, std::int64_t n) {
  float_to_half(in, out, n);
}
void bfloat16_to_float(const BFloat16* in, float* out, std::int64_t n) {
  half_to_float(in, out, n);
}

}  // namespace

HalfRowConverters half_row_converters() {
  return {float_to_float16, float16_to_float, float_to_bfloat16, bfloat16_to_float};
}

}  // namespace tessera::detail::TESSERA_CPU_ISA
