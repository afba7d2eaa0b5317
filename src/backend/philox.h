#pragma once
// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator. Element i of a draw uses counter (offset + i), so values depend
// only on seed and offset and are the same on every device and thread count. Written for
// host and device so the CUDA backend produces the same numbers.
#include <cmath>
#include <cstdint>
#include <limits>

#if defined(__CUDACC__)
#define TESSERA_HOST_DEVICE __host__ __device__
#else
#define TESSERA_HOST_DEVICE
#endif

namespace tessera::detail {

struct Philox4 {
  std::uint32_t x[4];
};

TESSERA_HOST_DEVICE inline Philox4 philox4x32(std::uint64_t counter, std::uint64_t seed) {
  std::uint32_t c0 = static_cast<std::uint32_t>(counter),
                c1 = static_cast<std::uint32_t>(counter >> 32);
  std::uint32_t c2 = 0, c3 = 0;
  std::uint32_t k0 = static_cast<std::uint32_t>(seed), k1 = static_cast<std::uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(0xD2511F53u) * c0;
    const std::uint64_t p1 = static_cast<std::uint64_t>(0xCD9E8D57u) * c2;
    const std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32),
                        lo0 = static_cast<std::uint32_t>(p0);
    const std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32),
                        lo1 = static_cast<std::uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// Uniform in [0, 1) with 24 (float) or 53 (double) random bits.
TESSERA_HOST_DEVICE inline float uniform_float(const Philox4& r) {
  return static_cast<float>(r.x[0] >> 8) * (1.0f / 16777216.0f);
}
TESSERA_HOST_DEVICE inline double uniform_double(const Philox4& r) {
  const std::uint64_t bits = (static_cast<std::uint64_t>(r.x[0]) << 21) ^ (r.x[1] >> 11);
  return static_cast<double>(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

// Uniform draws land in [low, high): low + (high - low) * u rounds up to high for u near 1
// (3% of uniform(1e6, 1e6 + 1) in float32), so a draw past the largest T below `high`
// (computed on the host: largest_below_bound) becomes that value, as PyTorch's do.
template <typename T>
TESSERA_HOST_DEVICE inline T below_bound(T v, T largest_below) {
  return v > largest_below ? largest_below : v;
}
// The largest T strictly below `high` (host side).
template <typename T>
inline T largest_below_bound(double high) {
  T f = static_cast<T>(high);
  if (static_cast<double>(f) >= high) f = std::nextafter(f, -std::numeric_limits<T>::infinity());
  return f;
}

// An integer in [low, low + span) from 64 random bits, modulo span: the bias toward small
// remainders is below span / 2^64 (none for a power of two), as PyTorch's randint. Computed
// in uint64, so a span past INT64_MAX (randint(INT64_MIN, INT64_MAX)) does not overflow.
TESSERA_HOST_DEVICE inline std::int64_t uniform_int(const Philox4& r, std::int64_t low,
                                                    std::uint64_t span) {
  const std::uint64_t bits = (static_cast<std::uint64_t>(r.x[0]) << 32) | r.x[1];
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(low) + bits % span);
}

// Standard normal by Box-Muller from two uniforms in (0, 1], computed in double so both
// backends round the same way.
TESSERA_HOST_DEVICE inline double normal_double(const Philox4& r) {
  const double u1 = (static_cast<double>(r.x[2]) + 1.0) * (1.0 / 4294967296.0);
  const double u2 = static_cast<double>(r.x[3]) * (1.0 / 4294967296.0);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace tessera::detail
