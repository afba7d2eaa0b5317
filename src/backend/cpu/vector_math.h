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

// The scalar functions here are always inlined: each is the body of a vectorized loop, and
// one left as a call (GCC's inliner gave up on the sigmoid's in a unit this large) makes the
// loop a scalar call per element, 13x slower.
//
// c ? a : b by bit masks: GCC keeps a float ?: as control flow below AVX-512 (where it has
// mask registers) and then vectorizes no loop around it.
[[gnu::always_inline]] inline float select(bool c, float a, float b) {
  const std::uint32_t m = 0u - static_cast<std::uint32_t>(c);
  return std::bit_cast<float>((std::bit_cast<std::uint32_t>(a) & m) |
                              (std::bit_cast<std::uint32_t>(b) & ~m));
}

// a * b + c, with one rounding where the level has FMA (x86-64-v3 and up; Note [CPU kernel
// variants] in cpu_backend.cpp) and two below it. cpu_elementwise.cpp is built with
// -ffp-contract=off (src/CMakeLists.txt: random numbers must match the GPU's), so GCC fused
// nothing there on its own; the polynomials here say where, and took 30% less time for it
// (exp of 1M floats 343 -> 244 us on a Zen 5), and fuse the same way in every file. A
// level's scalar tails fuse as its vector loops do: a value's result does not depend on
// its position.
[[gnu::always_inline]] inline float mul_add(float a, float b, float c) {
#if defined(__FMA__)
  return __builtin_fmaf(a, b, c);
#else
  return a * b + c;
#endif
}

// e^x for float, within 1.02 ulp of the correctly rounded value (measured over every
// seventh float in [-120, 90]; max relative error 7.9e-8 where the result is normal): inf
// above 88.72 and 0 below -103.97 like std::exp, and between -103.97 and -87.34 the
// denormals std::exp gives (a softmax's e^(x - max) of a far-off logit, or of -inf, is 0 as
// libm's was, not 2^-126); NaN gives NaN. Cody-Waite reduction x = n ln2 + r with
// |r| <= ln2 / 2, then Cephes' degree-6 polynomial for e^r. kNonPositive: x is known to be
// <= 0 or NaN (a softmax's x - max, a Gaussian's -x^2 / 2), so the overflow's clamp and
// select are left out (14% of the exp's time); the result is the same for every x up to
// 88.72, where e^x is still finite.
template <bool kNonPositive = false>
[[gnu::always_inline]] inline float exp_vectorizable(float x) {
  // 88.7228394 is the largest float whose e^x is finite (a clamp at 88.7228 made e^x of the
  // floats just above it 512 ulp low).
  const float low = select(x < -104.0f, -104.0f, x);
  const float clamped = kNonPositive ? low : select(x > 88.7228394f, 88.7228394f, low);
  // Round x / ln2 to the nearest integer with the 1.5 * 2^23 trick (no call to rint).
  constexpr float kMagic = 12582912.0f;
  const float t = mul_add(clamped, 1.44269504088896341f, kMagic);
  const float n = t - kMagic;
  const float r = mul_add(n, 2.12194440e-4f, mul_add(n, -0.693359375f, clamped));
  float p = 1.9875691500e-4f;
  p = mul_add(p, r, 1.3981999507e-3f);
  p = mul_add(p, r, 8.3334519073e-3f);
  p = mul_add(p, r, 4.1665795894e-2f);
  p = mul_add(p, r, 1.6666665459e-1f);
  p = mul_add(p, r, 5.0000001201e-1f);
  const float e = mul_add(p * r, r, r) + 1.0f;
  // 2^n from n's bits: t's low mantissa bits hold n + 2^22 offset from kMagic.
  const std::int32_t n_int = std::bit_cast<std::int32_t>(t) - std::bit_cast<std::int32_t>(kMagic);
  // n runs from -150 to 128, where 2^n is a denormal, nothing (2^-150, 2^128) or inf: it is
  // applied as two normal factors 2^(n/2) and 2^(n - n/2). e (in [0.7, 1.42]) times the
  // first is exact, so the result is rounded once, and only where it is a denormal. (n
  // reaches 128 from x = 88.38 on, where e^x is still finite up to 88.72: a made 2^128 was
  // inf, and a sigmoid there 0.)
  const std::int32_t half = n_int >> 1;
  const float result = e * std::bit_cast<float>((half + 127) << 23) *
                       std::bit_cast<float>((n_int - half + 127) << 23);
  // Past ln(FLT_MAX) the clamped input would give FLT_MAX-ish: inf, as std::exp. Below
  // ln(2^-150) std::exp is 0 (the clamped input rounds there too; this says it).
  const float underflowed = select(x < -104.0f, 0.0f, result);
  const float overflowed =
      kNonPositive ? underflowed
                   : select(x > 88.7228394f, std::numeric_limits<float>::infinity(), underflowed);
  return select(x != x, x, overflowed);
}

// ln x for float (Cephes' logf): x = 2^e m with m in [sqrt(1/2), sqrt 2), ln m from a
// degree-8 polynomial in m - 1 (exact: Sterbenz), e ln 2 added in two parts as exp's
// reduction does. Denormals are scaled by 2^23 first. 0 and -0 give -inf, +inf gives +inf,
// a negative x NaN and a NaN itself, as std::log. libm's logf does not vectorize: a scalar
// call per element took 9x this loop's time.
[[gnu::always_inline]] inline float log_vectorizable(float x) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const bool denormal = x < 1.17549435e-38f;  // below FLT_MIN (0 and negatives too: see below)
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(select(denormal, x * 8388608.0f, x));
  float e = static_cast<float>(static_cast<std::int32_t>(bits >> 23) - 126) -
            select(denormal, 23.0f, 0.0f);
  float m = std::bit_cast<float>((bits & 0x007fffffu) | 0x3f000000u);  // in [0.5, 1)
  const bool low = m < 0.707106781186547524f;
  e = select(low, e - 1.0f, e);
  m = select(low, m + m, m) - 1.0f;
  const float z = m * m;
  float p = 7.0376836292e-2f;
  p = mul_add(p, m, -1.1514610310e-1f);
  p = mul_add(p, m, 1.1676998740e-1f);
  p = mul_add(p, m, -1.2420140846e-1f);
  p = mul_add(p, m, 1.4249322787e-1f);
  p = mul_add(p, m, -1.6668057665e-1f);
  p = mul_add(p, m, 2.0000714765e-1f);
  p = mul_add(p, m, -2.4999993993e-1f);
  p = mul_add(p, m, 3.3333331174e-1f);
  float y = mul_add(e, -2.12194440e-4f, p * m * z);
  y = mul_add(z, -0.5f, y);
  const float result = mul_add(e, 0.693359375f, m + y);
  // Special values last, each a select: +inf (the polynomial saw m = 0.5, e = 129), zeros,
  // negatives (NaN; a NaN input keeps its own bits).
  const float finite = select(x == kInf, kInf, result);
  const float zero = select(x == 0.0f, -kInf, finite);
  const float negative = select(x < 0.0f, std::numeric_limits<float>::quiet_NaN(), zero);
  return select(x != x, x, negative);
}

[[gnu::always_inline]] inline float sigmoid_vectorizable(float x) {
  return 1.0f / (1.0f + exp_vectorizable(-x));
}

// tanh for float, within 1.4 ulp of the correctly rounded value (measured over every third
// float; libm's tanhf: 1 ulp), odd as tanh is: -0 stays -0.
[[gnu::always_inline]] inline float tanh_vectorizable(float x) {
  constexpr std::uint32_t kSign = 0x80000000u;
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const float a = std::bit_cast<float>(bits & ~kSign);
  // Small |x|: Cephes' odd polynomial, |x| plus a correction below |x| / 3, so the relative
  // accuracy holds down to the denormals (1 - 2 / (e^2x + 1) would cancel to 0 there).
  const float z = a * a;
  float q = -5.70498872745e-3f;
  q = mul_add(q, z, 2.06390887954e-2f);
  q = mul_add(q, z, -5.37397155531e-2f);
  q = mul_add(q, z, 1.33314422036e-1f);
  q = mul_add(q, z, -3.33332819422e-1f);
  const float small = mul_add(q * z, a, a);
  // |x| >= 0.625: 1 - 2 / (e^2|x| + 1) is at least 0.55, so the subtraction loses under a
  // bit; e^2|x| overflows to inf from |x| = 44.4 on, which makes it 1 as tanh is there.
  const float large = 1.0f - 2.0f / (exp_vectorizable(a + a) + 1.0f);
  // NaN fails a < 0.625 and takes `large`, which e^NaN made NaN. x's sign goes on by its
  // bit: a compare or a negation would make tanh(-0) +0.
  const float magnitude = select(a < 0.625f, small, large);
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(magnitude) | (bits & kSign));
}

// Note [Vectorized normal CDF]
// GELU needs Phi(x) = (1 + erf(x / sqrt 2)) / 2. Near 0 it is that, with erf from Norbert
// Juffa's odd polynomial (published as erff, max error 0.99 ulp with fused multiply-adds;
// max 1.19 ulp without them, measured against double std::erf over every float in [-6, 6];
// fused here where the level has FMA, mul_add). Past |z| = 0.9277 the same author's fit
// gives erfc(|z|) = e^r(|z|), used as it is: Phi(x) = erfc(|z|) / 2 for x < 0 keeps its
// relative accuracy (within 7.2e-5 down to x = -6, 0.2% at -7; PyTorch's 1 + erf cancels,
// 17% off at x = -5), and Phi(x) = 1 - erfc(|z|) / 2 for x > 0 (within 1.18 ulp there, with or
// without FMA). Below x = -7 the fit drifts (29% at -10), where |x * Phi(x)| is under 1e-11.
[[gnu::always_inline]] inline float normal_cdf_vectorizable(float x) {
  const float z = x * 0.707106781186547524f;
  const float t = std::bit_cast<float>(std::bit_cast<std::uint32_t>(z) & 0x7fffffffu);
  const float s = z * z;
  float p = -5.96761703e-4f;  // erf(z) / z - 1 on |z| <= 0.9277, in s = z^2
  p = mul_add(p, s, 4.99119423e-3f);
  p = mul_add(p, s, -2.67681349e-2f);
  p = mul_add(p, s, 1.12819925e-1f);
  p = mul_add(p, s, -3.76125336e-1f);
  p = mul_add(p, s, 1.28379166e-1f);
  const float erf_small = mul_add(p, z, z);
  float r = mul_add(-1.72853470e-5f, t, 3.83197126e-4f);  // log erfc(t) on t > 0.9277
  const float u = mul_add(-3.88396438e-3f, t, 2.42546219e-2f);
  r = mul_add(r, s, u);
  r = mul_add(r, t, -1.06777877e-1f);
  r = mul_add(r, t, -6.34846687e-1f);
  r = mul_add(r, t, -1.28717512e-1f);
  r = mul_add(r, t, -t);
  const float half_erfc = 0.5f * exp_vectorizable<true>(r);  // r <= 0; e^-inf = 0 at -inf
  const float large = select(x < 0.0f, half_erfc, 1.0f - half_erfc);
  // NaN fails t > 0.9277 and takes the polynomial, which keeps it NaN.
  return select(t > 0.927734375f, large, 0.5f + 0.5f * erf_small);
}

// gelu(x) = x * Phi(x); -0 at -inf (the limit; inf * 0 would be NaN).
[[gnu::always_inline]] inline float gelu_vectorizable(float x) {
  return select(x == -std::numeric_limits<float>::infinity(), -0.0f,
                x * normal_cdf_vectorizable(x));
}

// The tanh approximation 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), as
// x / (1 + e^-2u), which it equals: no 1 + tanh to cancel for negative x. -0 at -inf.
[[gnu::always_inline]] inline float gelu_tanh_inner(float x) {
  return 0.797884560802865356f * (x + 0.044715f * (x * x * x));
}
[[gnu::always_inline]] inline float gelu_tanh_vectorizable(float x) {
  const float y = x / (1.0f + exp_vectorizable(-2.0f * gelu_tanh_inner(x)));
  return select(x == -std::numeric_limits<float>::infinity(), -0.0f, y);
}

// silu(x) = x * sigmoid(x) = x / (1 + e^-x); -0 at -inf.
[[gnu::always_inline]] inline float silu_vectorizable(float x) {
  const float y = x / (1.0f + exp_vectorizable(-x));
  return select(x == -std::numeric_limits<float>::infinity(), -0.0f, y);
}

// Their slopes times g, PyTorch's formulas (gelu: Phi(x) + x phi(x); the tanh form:
// sigma + 2 x sigma (1 - sigma) sqrt(2/pi) (1 + 3 0.044715 x^2) with sigma = sigmoid(2u), which
// is 0.5 (1 + tanh u) and its tanh' term; silu: sigma (1 + x (1 - sigma))). Past |x| = 1e10
// each slope is its limit, 0 or 1, to the last bit; there the limit is taken, since
// inf * 0 (at +-inf, or x^2 overflowing) would be NaN.
[[gnu::always_inline]] inline float slope_limit(float x, float slope) {
  const float a = std::bit_cast<float>(std::bit_cast<std::uint32_t>(x) & 0x7fffffffu);
  return select(a > 1e10f, select(x > 0.0f, 1.0f, 0.0f), slope);
}
[[gnu::always_inline]] inline float gelu_grad_vectorizable(float g, float x) {
  const float pdf = 0.398942280401432678f * exp_vectorizable<true>(-0.5f * (x * x));
  return g * slope_limit(x, normal_cdf_vectorizable(x) + x * pdf);
}
[[gnu::always_inline]] inline float gelu_tanh_grad_vectorizable(float g, float x) {
  const float sigma = 1.0f / (1.0f + exp_vectorizable(-2.0f * gelu_tanh_inner(x)));
  const float inner_slope = 0.797884560802865356f * (1.0f + 3.0f * 0.044715f * (x * x));
  return g * slope_limit(x, sigma + 2.0f * x * sigma * (1.0f - sigma) * inner_slope);
}
[[gnu::always_inline]] inline float silu_grad_vectorizable(float g, float x) {
  const float sigma = 1.0f / (1.0f + exp_vectorizable(-x));
  return g * slope_limit(x, sigma * (1.0f + x * (1.0f - sigma)));
}

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

// y[i] = e^x[i], ln x[i] and tanh(x[i]) for float runs. simd as for the sigmoid.
inline void exp_vectorizable(const float* x, std::int64_t n, float* y) {
#pragma omp simd simdlen(16)
  for (std::int64_t i = 0; i < n; ++i) y[i] = exp_vectorizable(x[i]);
}
inline void log_vectorizable(const float* x, std::int64_t n, float* y) {
#pragma omp simd simdlen(16)
  for (std::int64_t i = 0; i < n; ++i) y[i] = log_vectorizable(x[i]);
}
inline void tanh_vectorizable(const float* x, std::int64_t n, float* y) {
#pragma omp simd simdlen(16)
  for (std::int64_t i = 0; i < n; ++i) y[i] = tanh_vectorizable(x[i]);
}

// y[i] = gelu, its tanh form or silu of x[i] for float runs (y may be x).
inline void gelu_vectorizable(const float* x, std::int64_t n, float* y) {
#pragma omp simd simdlen(16)
  for (std::int64_t i = 0; i < n; ++i) y[i] = gelu_vectorizable(x[i]);
}
inline void gelu_tanh_vectorizable(const float* x, std::int64_t n, float* y) {
#pragma omp simd simdlen(16)
  for (std::int64_t i = 0; i < n; ++i) y[i] = gelu_tanh_vectorizable(x[i]);
}
inline void silu_vectorizable(const float* x, std::int64_t n, float* y) {
#pragma omp simd simdlen(16)
  for (std::int64_t i = 0; i < n; ++i) y[i] = silu_vectorizable(x[i]);
}

// The largest of x[0, n) that is not NaN, -inf where there is none: the value of the scalar
// chain `m = x[i] > m ? x[i] : m` (a max of the numbers, whatever their order), kept in 16
// running maxima so that it vectorizes; the chain waited on each compare.
inline float max_vectorizable(const float* x, std::int64_t n) {
  constexpr int kLanes = 16;
  constexpr float kLowest = -std::numeric_limits<float>::infinity();
  float lanes[kLanes];
  for (int j = 0; j < kLanes; ++j) lanes[j] = kLowest;
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) lanes[j] = x[i + j] > lanes[j] ? x[i + j] : lanes[j];
  }
  float m = kLowest;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (int j = 0; j < kLanes; ++j) m = lanes[j] > m ? lanes[j] : m;
  return m;
}

// The sum in double of e^(x[i] - shift) over x[0, n), and with `y` (which may not overlap x)
// y[i] = e^(x[i] - shift): a softmax's denominator. `shift` is the largest of x (or a NaN
// row's), so x[i] - shift is <= 0 or NaN: exp_vectorizable<true>. Partial sums, one per vector
// lane, so the additions do not wait on each other; each term is a float below 1 added in double,
// so their order moves the sum by well under a float ulp.
inline double exp_sum_vectorizable(const float* x, std::int64_t n, float shift, float* y) {
  double sum = 0;
  if (y != nullptr) {
#pragma omp simd simdlen(16) reduction(+ : sum)
    for (std::int64_t i = 0; i < n; ++i) {
      const float e = exp_vectorizable<true>(x[i] - shift);
      y[i] = e;
      sum += static_cast<double>(e);
    }
  } else {
#pragma omp simd simdlen(16) reduction(+ : sum)
    for (std::int64_t i = 0; i < n; ++i) {
      sum += static_cast<double>(exp_vectorizable<true>(x[i] - shift));
    }
  }
  return sum;
}

}  // namespace tessera::detail::TESSERA_CPU_ISA
