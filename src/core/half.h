#pragma once
// The storage types of bfloat16 and float16 on the host: two bytes, converted to and from
// float32 by rounding to the nearest even value (NaN stays NaN, infinities stay infinite,
// float16 overflows to infinity and keeps subnormals). Arithmetic on them goes through
// float (the implicit conversion), which is how every CPU kernel computes with them.
// The CUDA kernels use cuda_bf16.h / cuda_fp16.h instead (kernels_copy.cu).
#include <cstdint>
#include <cstring>

namespace tessera::detail {

inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline std::uint16_t float_to_bfloat16_bits(float f) {
  const std::uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
inline float bfloat16_bits_to_float(std::uint16_t h) {
  return bits_float(static_cast<std::uint32_t>(h) << 16);
}

// See Note [float16 rounding].
inline std::uint16_t float_to_float16_bits(float f) {
  std::uint32_t x = float_bits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
  if (x >= 0x47800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65536
  if (x < 0x38800000u) {  // below 2^-14: a subnormal float16 (or zero)
    const float t = bits_float(x) + 0.5f;
    return static_cast<std::uint16_t>(sign | (float_bits(t) - 0x3f000000u));
  }
  x += 0xc8000fffu + ((x >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (x >> 13));
}
inline float float16_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    const float v = static_cast<float>(mant) * 0x1p-24f;  // exact
    return bits_float(sign | float_bits(v));
  }
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

// Note [float16 rounding]
// Normal results: rebias the exponent (127 -> 15 is -112 << 23) and add half an ulp of the
// 13 dropped bits minus one, plus the kept lowest bit, so a tie rounds to even and a carry
// moves into the exponent (65520 becomes infinity). Subnormal results: adding 0.5f puts the
// value where a float's ulp is 2^-24, a float16 subnormal's, so the FPU's own
// round-to-nearest-even does the rounding and the low bits are the float16 mantissa.

struct BFloat16 {
  std::uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) : bits(float_to_bfloat16_bits(f)) {}
  operator float() const { return bfloat16_bits_to_float(bits); }
};

struct Float16 {
  std::uint16_t bits = 0;
  Float16() = default;
  explicit Float16(float f) : bits(float_to_float16_bits(f)) {}
  operator float() const { return float16_bits_to_float(bits); }
};

static_assert(sizeof(BFloat16) == 2 && sizeof(Float16) == 2);

}  // namespace tessera::detail
