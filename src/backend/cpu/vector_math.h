#pragma once
// Math the compiler can vectorize: no library calls, no branches, only arithmetic and bit
// operations on each element, so a loop over floats becomes AVX-512 code.
#include <bit>
#include <cstdint>
#include <limits>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace tessera::detail::TESSERA_CPU_ISA {  // kernels only: cpu_backend.h

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
  // n reaches 128 from x = 88.38 on, where e^x is still finite (up to 88.72): 2^128 has no
  // float, so it is applied as 2^127 * 2 (the made 2^128 was inf, and e.g. a sigmoid there 0).
  const bool top = n_int > 127;
  const float scale = std::bit_cast<float>(((top ? 127 : n_int) + 127) << 23);
  const float result = e * scale * (top ? 2.0f : 1.0f);
  // Past ln(FLT_MAX) the clamped input would give FLT_MAX-ish: inf, as std::exp.
  const float overflowed = x > 88.7228394f ? std::numeric_limits<float>::infinity() : result;
  return x != x ? x : overflowed;
}

inline float sigmoid_vectorizable(float x) { return 1.0f / (1.0f + exp_vectorizable(-x)); }

// v[i] = 1 / v[i] for v[i] >= 1 (+inf and NaN included). Where AVX-512 is there, by its
// 14-bit reciprocal and one Newton step (relative error ~2^-28, so within an ulp of the
// division): vdivps was half of a sigmoid's time.
inline void reciprocal_of_at_least_one(float* v, std::int64_t n) {
  std::int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 two = _mm512_set1_ps(2.0f);
  const __m512 inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  for (; i + 16 <= n; i += 16) {
    const __m512 d = _mm512_loadu_ps(v + i);
    const __m512 r = _mm512_rcp14_ps(d);
    const __m512 refined = _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, two));
    // 1 / inf (a sigmoid of x below about -88.7) is the estimate's 0, where the Newton step
    // would make inf * 0 = NaN.
    const __mmask16 finite = _mm512_cmp_ps_mask(d, inf, _CMP_NEQ_UQ);
    _mm512_storeu_ps(v + i, _mm512_mask_blend_ps(finite, r, refined));
  }
  // The tail the same way, masked: a value's reciprocal must not depend on its position
  // (the division, a tail's, and the estimate differ in the last bit).
  if (i < n) {
    const auto tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 d = _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), tail, v + i);
    const __m512 r = _mm512_rcp14_ps(d);
    const __m512 refined = _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, two));
    const __mmask16 finite = _mm512_cmp_ps_mask(d, inf, _CMP_NEQ_UQ);
    _mm512_mask_storeu_ps(v + i, tail, _mm512_mask_blend_ps(finite, r, refined));
    i = n;
  }
#endif
  for (; i < n; ++i) v[i] = 1.0f / v[i];
}

// y[i] = sigmoid(x[i]) for a run of at most a few thousand floats: the exponentials in one
// vectorized loop, then the reciprocals.
inline void sigmoid_vectorizable(const float* x, std::int64_t n, float* y) {
  // simd: without it GCC keeps exp_vectorizable's selects as branches and does not vectorize.
#pragma omp simd simdlen(16)
  for (std::int64_t i = 0; i < n; ++i) y[i] = 1.0f + exp_vectorizable(-x[i]);
  reciprocal_of_at_least_one(y, n);
}

}  // namespace tessera::detail::TESSERA_CPU_ISA
