#pragma once
// Note [Vectorized normal draws]
// randn's Box-Muller, sqrt(-2 ln u1) cos(2 pi u2) in double from one Philox draw
// (backend/philox.h), without libm: glibc's log and cos per value were 90% of randn's time
// (22.5 ms for 1M floats, 8.8x PyTorch's), and a loop of these arithmetic-only forms
// vectorizes. Within an ulp or two of libm's double values (under 4 ulp of the radius
// sqrt(-2 ln u1) over 15M draws); the float32 normals are those values rounded, so they differ
// from the libm ones only where a double lands within a few ulp of a rounding boundary (one
// in 15M draws, where this value was the closer to the exact one: libm's
// cos(6.283185307179586 u2) is off near the quarter turns, this quarter turn exact). The
// CUDA backend keeps its own log and cos, which never matched glibc's to the last bit either.
//
// Only plain double operations, no fused multiply-adds: the including file must be built with
// -ffp-contract=off (cpu_elementwise.cpp is, src/CMakeLists.txt), so every instruction-set
// level gives the same bits and a seed the same numbers on every CPU.
#include <bit>
#include <cmath>
#include <cstdint>

#include "backend/philox.h"

namespace tessera::detail::TESSERA_CPU_ISA {  // kernels only: cpu_backend.h

// ln(k / 2^32) for an integer k in [1, 2^32]: fdlibm's log (e_log.c, under 1 ulp), with the
// division by 2^32 folded into the exponent. k is a normal double, never 0, inf or NaN.
[[gnu::always_inline]] inline double log_of_draw(double k) {
  constexpr double kLn2Hi = 6.93147180369123816490e-01, kLn2Lo = 1.90821492927058770002e-10;
  const std::uint64_t bits = std::bit_cast<std::uint64_t>(k);
  // k = 2^e m with m in [sqrt(1/2), sqrt 2): m's bits take the exponent 0 or -1.
  // Integer arithmetic only, no bool: GCC vectorized no loop with a bool select in it.
  const std::uint64_t mantissa = bits & 0x000fffffffffffffull;
  const std::uint64_t high = (0x6a09e667f3bcdull - mantissa) >> 63;  // 1 where m > sqrt 2
  const double m = std::bit_cast<double>(mantissa | (0x3ff0000000000000ull - (high << 52)));
  const double dk = static_cast<double>(static_cast<std::int32_t>(bits >> 52) - 1023 - 32 +
                                        static_cast<std::int32_t>(high));
  const double f = m - 1.0;
  const double s = f / (2.0 + f);
  const double z = s * s, w = z * z;
  const double t1 = w * (3.999999999940941908e-01 +
                         w * (2.222219843214978396e-01 + w * 1.531383769920937332e-01));
  const double t2 = z * (6.666666666666735130e-01 +
                         w * (2.857142874366239149e-01 +
                              w * (1.818357216161805012e-01 + w * 1.479819860511658591e-01)));
  const double r = t2 + t1, hfsq = 0.5 * f * f;
  return dk * kLn2Hi - ((hfsq - (s * (hfsq + r) + dk * kLn2Lo)) - f);
}

// cos(2 pi j / 2^32) for an integer j in [0, 2^32): the quadrant comes off j exactly
// (f = j / 2^32 - q / 4 in [-1/8, 1/8] without rounding), then fdlibm's sin and cos kernels
// (k_sin.c, k_cos.c) on 2 pi f in [-pi/4, pi/4].
[[gnu::always_inline]] inline double cos_of_draw(std::uint32_t j) {
  const std::uint32_t q = (j + 0x20000000u) >> 30;  // round(4 j / 2^32) mod 4; j near 2^32: 0
  const double f =
      static_cast<double>(static_cast<std::int32_t>(j - (q << 30))) * (1.0 / 4294967296.0);
  const double x = f * 6.283185307179586476925;
  const double z = x * x;
  const double sin_r =
      8.33333333332248946124e-03 +
      z * (-1.98412698298579493134e-04 +
           z * (2.75573137070700676789e-06 +
                z * (-2.50507602534068634195e-08 + z * 1.58969099521155010221e-10)));
  const double sine = x + z * x * (-1.66666666666666324348e-01 + z * sin_r);
  const double cos_r =
      z * (4.16666666666666019037e-02 +
           z * (-1.38888888888741095749e-03 +
                z * (2.48015872894767294178e-05 +
                     z * (-2.75573143513906633035e-07 +
                          z * (2.08757232129817482790e-09 + z * -1.13596475577881948265e-11)))));
  const double hz = 0.5 * z, w = 1.0 - hz;
  const double cosine = w + (((1.0 - w) - hz) + z * cos_r);
  // cos(x + q pi / 2): cos x, -sin x, -cos x, sin x; by bit masks, as in log_of_draw.
  const std::uint64_t odd = 0u - static_cast<std::uint64_t>(q & 1u);
  const std::uint64_t magnitude =
      (std::bit_cast<std::uint64_t>(sine) & odd) | (std::bit_cast<std::uint64_t>(cosine) & ~odd);
  const std::uint64_t sign = static_cast<std::uint64_t>((q + 1u) & 2u) << 62;  // q = 1, 2
  return std::bit_cast<double>(magnitude ^ sign);
}

// A standard normal from the third and fourth words of one Philox draw, which make u1 in
// (0, 1] and u2 in [0, 1) as normal_double (backend/philox.h) takes them. The words, not
// the draw: a Philox4 passed on went through memory, and the loop did not vectorize.
[[gnu::always_inline]] inline double normal_of_draw(std::uint32_t third, std::uint32_t fourth) {
  const double log_u1 = log_of_draw(static_cast<double>(third) + 1.0);
  return std::sqrt(-2.0 * log_u1) * cos_of_draw(fourth);
}

}  // namespace tessera::detail::TESSERA_CPU_ISA
