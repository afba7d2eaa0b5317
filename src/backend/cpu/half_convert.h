#pragma once
// Dense runs between float32 and the half types, inline, for the kernel level this is built
// for: the F16C instructions where the level has them, loops the compiler vectorizes
// otherwise (Note [Half rows] in half_rows.cpp, which hands these to the rest of tessera as
// function pointers; kernels built per level call them directly, in loops too short for a
// call per run).
#include <cstdint>

#include "core/half.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace tessera::detail::TESSERA_CPU_ISA {  // kernels only: cpu_backend.h

inline void half_to_float(const Float16* in, float* out, std::int64_t n) {
  std::int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(out + i,
                     _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i))));
  }
#endif
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  }
#endif
  for (; i < n; ++i) out[i] = static_cast<float>(in[i]);
}

// bfloat16's conversions are integer operations the compiler vectorizes at every level.
inline void half_to_float(const BFloat16* in, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
}

inline void float_to_half(const float* in, Float16* out, std::int64_t n) {
  std::int64_t i = 0;
#if defined(__F16C__)
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
#endif
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(in + i), kRound));
  }
#endif
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), kRound));
  }
#endif
  for (; i < n; ++i) out[i] = Float16(in[i]);
}

inline void float_to_half(const float* in, BFloat16* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = BFloat16(in[i]);
}

}  // namespace tessera::detail::TESSERA_CPU_ISA
