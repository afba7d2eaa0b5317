// CPU matmul: batched GEMM through oneDNN (large float32) or OpenBLAS (small float32, all
// float64). See Note [CPU GEMM choice].
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <limits>
#include <type_traits>

#include "backend/cpu/cpu_backend.h"
#include "core/check.h"
#include "core/dispatch.h"
#include "core/tensor_impl.h"

// Note [CPU GEMM choice]
// oneDNN's dnnl_sgemm beats OpenBLAS by 5-45% once M*N*K >= 32768, but costs ~300 ns per call
// (and a ~30 ms JIT on its first), so small products go to cblas_sgemm. float64 always uses
// cblas_dgemm. Many small matrices in a batch run one per thread instead (both libraries run
// single-threaded inside a parallel region).

namespace tessera::detail::TESSERA_CPU_ISA {  // built once per level: cpu_backend.h
namespace {

using i64 = std::int64_t;

constexpr i64 kDnnlMinWork = 32768;

// One operand's BLAS view: transpose flag and leading dimension (see Note [Matmul operands]
// in src/ops/matmul.cpp: the front end hands over row-major or transposed matrices only).
struct GemmOperand {
  bool trans;
  i64 ld;
  i64 batch_stride;
  char* data;
};

GemmOperand gemm_operand(const Tensor& t) {
  const Strides& st = impl_of(t).strides;
  const bool trans = st[2] != 1;
  TESSERA_INTERNAL_ASSERT(!trans || st[1] == 1, "matmul operand strides {} are not BLAS-able",
                          st.str());
  return {trans, trans ? st[2] : st[1], st[0], impl_of(t).data()};
}

void check_dnnl(dnnl_status_t status, i64 m, i64 n, i64 k) {
  TESSERA_CHECK(status == dnnl_success, Error,
                "[matmul] oneDNN sgemm failed with status {} for M={}, N={}, K={}; this may be "
                "out of memory, or an environment problem with oneDNN",
                static_cast<int>(status), m, n, k);
}

template <typename T>
void gemm(const GemmOperand& a, const GemmOperand& b, T* c, i64 m, i64 n, i64 k, i64 bi) {
  const T* pa = reinterpret_cast<const T*>(a.data) + bi * a.batch_stride;
  const T* pb = reinterpret_cast<const T*>(b.data) + bi * b.batch_stride;
  T* pc = c + bi * m * n;
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  const auto ta = a.trans ? CblasTrans : CblasNoTrans, tb = b.trans ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    if (m * n * k >= kDnnlMinWork) {
      check_dnnl(dnnl_sgemm(a.trans ? 'T' : 'N', b.trans ? 'T' : 'N', m, n, k, 1.0f, pa, a.ld, pb,
                            b.ld, 0.0f, pc, n),
                 m, n, k);
      return;
    }
    cblas_sgemm(CblasRowMajor, ta, tb, mi, ni, ki, 1.0f, pa, static_cast<int>(a.ld), pb,
                static_cast<int>(b.ld), 0.0f, pc, ni);
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, mi, ni, ki, 1.0, pa, static_cast<int>(a.ld), pb,
                static_cast<int>(b.ld), 0.0, pc, ni);
  }
}

template <typename T>
void matmul_typed(const Tensor& a, const Tensor& b, const Tensor& out) {
  const i64 batches = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  T* c = reinterpret_cast<T*>(impl_of(out).data());
  if (out.numel() == 0) return;
  if (k == 0) {  // an empty sum: BLAS would reject the leading dimensions
    std::fill(c, c + out.numel(), T{0});
    return;
  }
  const GemmOperand ga = gemm_operand(a), gb = gemm_operand(b);
  // Small products in a batch: one matrix per thread beats threading inside each GEMM.
  if (batches > 1 && m * n * k < kDnnlMinWork && batches * m * n * k >= kDnnlMinWork &&
      !omp_in_parallel()) {
#pragma omp parallel for schedule(static)
    for (i64 bi = 0; bi < batches; ++bi) gemm<T>(ga, gb, c, m, n, k, bi);
    return;
  }
  for (i64 bi = 0; bi < batches; ++bi) gemm<T>(ga, gb, c, m, n, k, bi);
}

}  // namespace

void CpuBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  // cblas takes int sizes (oneDNN 64-bit ones); checked here so the error is not deferred
  // to the device's queue.
  const i64 m = out.size(1), n = out.size(2), k = a.size(2);
  if (out.numel() > 0 && k > 0) {
    const i64 lda = gemm_operand(a).ld, ldb = gemm_operand(b).ld;
    const i64 int_max = std::numeric_limits<int>::max();
    TESSERA_CHECK((out.dtype() == kFloat32 && m * n * k >= kDnnlMinWork) ||
                      std::max({m, n, k, lda, ldb}) <= int_max,
                  ShapeError,
                  "[matmul] sizes M={}, N={}, K={} (leading dims {}, {}) exceed OpenBLAS's "
                  "32-bit limit for {}; split the product into smaller blocks",
                  m, n, k, lda, ldb, dtype_name(out.dtype()));
  }
  launch(out.device().index(), [a, b, out] {
    dispatch_floating(out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      matmul_typed<T>(a, b, out);
    });
  });
}

}  // namespace tessera::detail::TESSERA_CPU_ISA
