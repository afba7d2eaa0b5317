#pragma once
// The storage types of bfloat16 and float16 on the host: two bytes, converted to and from
// float32 by rounding to the nearest even value (NaN stays NaN, quieted as the F16C
// instructions quiet it, infinities stay infinite, float16 overflows to infinity and keeps
// subnormals). Arithmetic on them goes through
// float (the implicit conversion), which is how every CPU kernel computes with them.
// The CUDA kernels use cuda_bf16.h / cuda_fp16.h instead (kernels_copy.cu).
#include <cmath>
#include <cstdint>
#include <cstring>

// Always inlined: in a kernel that converts many dtypes (the CPU copy kernel's dozens of
// instantiations) the compiler's inlining budget runs out, and perf showed a call per
// element to float_to_float16_bits.
#define TESSERA_HALF_INLINE [[gnu::always_inline]] inline

namespace tessera::detail {

TESSERA_HALF_INLINE std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
TESSERA_HALF_INLINE float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

TESSERA_HALF_INLINE std::uint16_t float_to_bfloat16_bits(float f) {
  const std::uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
TESSERA_HALF_INLINE float bfloat16_bits_to_float(std::uint16_t h) {
  return bits_float(static_cast<std::uint32_t>(h) << 16);
}

// See Note [float16 rounding]. Every case is computed and one is selected, without branches
// (the same bits as the branching form for all 2^32 inputs, checked exhaustively once).
TESSERA_HALF_INLINE std::uint16_t float_to_float16_bits(float f) {
  const std::uint32_t all = float_bits(f);
  const std::uint32_t sign = (all >> 16) & 0x8000u;
  const std::uint32_t x = all & 0x7fffffffu;
  const std::uint32_t nan = 0x7e00u | ((x >> 13) & 0x3ffu);
  // Below 2^-14: a subnormal float16 (or zero). The mask keeps the addition finite for the
  // inputs whose result another case gives.
  const std::uint32_t subnormal = float_bits(bits_float(x & 0x3fffffffu) + 0.5f) - 0x3f000000u;
  const std::uint32_t normal = (x + 0xc8000fffu + ((x >> 13) & 1u)) >> 13;
  std::uint32_t r = x < 0x38800000u ? subnormal : normal;
  r = x >= 0x47800000u ? 0x7c00u : r;  // >= 65536: infinity
  r = x > 0x7f800000u ? nan : r;
  return static_cast<std::uint16_t>(sign | r);
}
// Branch-free as float_to_float16_bits.
TESSERA_HALF_INLINE float float16_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  // A NaN comes back quiet (bit 22 set), as vcvtph2ps returns it (Note [Half rows]).
  const std::uint32_t inf_nan = 0x7f800000u | (mant << 13) | (mant != 0 ? 0x00400000u : 0u);
  const std::uint32_t subnormal = float_bits(static_cast<float>(mant) * 0x1p-24f);  // exact
  const std::uint32_t normal = ((exp + 112u) << 23) | (mant << 13);
  std::uint32_t r = exp == 0 ? subnormal : normal;
  r = exp == 0x1f ? inf_nan : r;
  return bits_float(sign | r);
}

// Note [float16 rounding]
// Normal results: rebias the exponent (127 -> 15 is -112 << 23) and add half an ulp of the
// 13 dropped bits minus one, plus the kept lowest bit, so a tie rounds to even and a carry
// moves into the exponent (65520 becomes infinity). Subnormal results: adding 0.5f puts the
// value where a float's ulp is 2^-24, a float16 subnormal's, so the FPU's own
// round-to-nearest-even does the rounding and the low bits are the float16 mantissa.

// A double as a float rounded toward zero with its last bit set when inexact ("round to
// odd"): rounding that float to bfloat16 or float16 (far fewer bits) then rounds the double
// once, as going through the nearest float does not (65519.999 is 65520.0f, which rounds
// to infinity; float16's nearest is 65504).
inline float double_to_float_round_odd(double d) {
  float f = static_cast<float>(d);                      // the nearest float (or infinity)
  if (d != d || static_cast<double>(f) == d) return f;  // NaN, or exact
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0F);
  return bits_float(float_bits(f) | 1U);
}

struct BFloat16 {
  std::uint16_t bits = 0;
  BFloat16() = default;
  [[gnu::always_inline]] explicit BFloat16(float f) : bits(float_to_bfloat16_bits(f)) {}
  [[gnu::always_inline]] operator float() const { return bfloat16_bits_to_float(bits); }
};

struct Float16 {
  std::uint16_t bits = 0;
  Float16() = default;
  [[gnu::always_inline]] explicit Float16(float f) : bits(float_to_float16_bits(f)) {}
  [[gnu::always_inline]] operator float() const { return float16_bits_to_float(bits); }
};

static_assert(sizeof(BFloat16) == 2 && sizeof(Float16) == 2);

}  // namespace tessera::detail
