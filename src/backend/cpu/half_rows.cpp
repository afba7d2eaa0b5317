// Dense float32 <-> half rows (core/half_rows.h) for the CPU copy kernel and the half sums of
// the collectives, built once per kernel level.
#include "backend/cpu/copy_kernel.h"
#include "backend/cpu/cpu_backend.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

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

#if defined(__F16C__)
constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
#endif

void float_to_float16(const float* in, Float16* out, std::int64_t n) {
  std::int64_t i = 0;
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

void float16_to_float(const Float16* in, float* out, std::int64_t n) {
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

// bfloat16's conversions are integer operations the compiler vectorizes at every level,
// once they are a loop of their own (in the copy kernel's many instantiations they were not).
void float_to_bfloat16(const float* in, BFloat16* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = BFloat16(in[i]);
}

void bfloat16_to_float(const BFloat16* in, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
}

}  // namespace

HalfRowConverters half_row_converters() {
  return {float_to_float16, float16_to_float, float_to_bfloat16, bfloat16_to_float};
}

}  // namespace tessera::detail::TESSERA_CPU_ISA
