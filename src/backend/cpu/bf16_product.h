#pragma once
// One bfloat16 product layout of oneDNN's (Note [CPU bfloat16 GEMM] in cpu_matmul.cpp), for
// kernels that run many products of it inside a parallel region: the primitive is made
// before the region, where a failure can throw, and run in it, where nothing may.
#include <cstdint>
#include <memory>

#include "core/half.h"

namespace tessera::detail::TESSERA_CPU_ISA {  // kernels only: cpu_backend.h

// Whether this CPU multiplies bfloat16 natively and the user left it on
// (TESSERA_CPU_BF16_MATMUL); false at the levels below AVX-512.
bool cpu_bf16_matmul_on();

struct Bf16Gemm;

// c [m, n] (float32, row-major, dense) = op(a) [m, k] op(b) [k, n], bfloat16 with leading
// dims lda and ldb, each row-major or (ta, tb) the transpose of a row-major matrix: exact
// products summed in float32.
class Bf16Product {
 public:
  Bf16Product(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t lda, std::int64_t ldb,
              bool ta = false, bool tb = false);
  // On this thread, with a scratchpad of its own; false if oneDNN failed (out of memory).
  bool run(const BFloat16* a, const BFloat16* b, float* c) const noexcept;

 private:
  std::shared_ptr<const Bf16Gemm> gemm_;
};

}  // namespace tessera::detail::TESSERA_CPU_ISA
