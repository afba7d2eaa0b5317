// CPU matmul: batched GEMM through oneDNN (large float32, bfloat16 where the CPU multiplies
// it) or OpenBLAS (small float32, all float64). See Note [CPU GEMM choice].
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <type_traits>

#include "backend/cpu/bf16_product.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/onednn_matmul.h"
#include "backend/cpu/primitive_cache.h"
#include "core/check.h"
#include "core/dispatch.h"
#include "core/tensor_impl.h"

// Note [CPU GEMM choice]
// oneDNN's dnnl_sgemm beats OpenBLAS by 5-45% once M*N*K >= 32768, but costs ~300 ns per call
// (and a ~30 ms JIT on its first), so small products go to cblas_sgemm. float64 always uses
// cblas_dgemm. Many small matrices in a batch run one per thread instead (both libraries run
// single-threaded inside a parallel region).

// Note [CPU bfloat16 GEMM]
// A CPU with AVX512-BF16 (vdpbf16ps: bfloat16 products summed in float32) multiplies
// bfloat16 operands as they are, through a oneDNN matmul primitive that rounds once into the
// bfloat16 output (or writes the float32 sums, for nn::Linear, which adds its bias before
// rounding): no float32 copies of the operands, half their memory traffic. Primitives
// are kept per shape and layout (creating one costs far more than a small product). Other
// CPUs, float16, and TESSERA_CPU_BF16_MATMUL=0 take the front end's float32 path (Note [Half
// precision]); both give float32 sums of exact products, rounded once.

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

// One bfloat16 product's layout: the key of its oneDNN primitive.
struct Bf16GemmKey {
  i64 m, n, k, lda, ldb;
  bool ta, tb;
  bool float32_out;  // the sums unrounded (detail::half_product_float32)
  auto tie() const { return std::tie(m, n, k, lda, ldb, ta, tb, float32_out); }
  bool operator<(const Bf16GemmKey& o) const { return tie() < o.tie(); }
};

struct Bf16Gemm {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul primitive;
};

// Note [One primitive on several threads]
// One primitive per layout serves every device's queue and user thread, and they run it at
// once (two logical devices training one bfloat16 model, two user threads). With oneDNN's
// default, library-managed scratchpad (2.x built without concurrent execution, as Debian's
// is), each primitive owns one scratchpad, so two runs at once wrote each other's partial
// sums: about one product in two was wrong, by as much as the values themselves. Each call
// now hands the primitive a scratchpad of its own thread (scratchpad_mode::user), which
// oneDNN documents as safe to execute from several threads at once.

// The primitive of `key`, made on first use (Note [One primitive on several threads]); the
// most recently used kPrimitivesKept are kept (about 100 KB each).
std::shared_ptr<const Bf16Gemm> bf16_gemm(const Bf16GemmKey& key) {
  constexpr std::size_t kPrimitivesKept = 256;
  static PrimitiveCache<Bf16GemmKey, Bf16Gemm> cache(kPrimitivesKept);
  return cache.get(key, [&] {
    using md = dnnl::memory::desc;
    using dt = dnnl::memory::data_type;
    // Row-major [m, k] has strides {lda, 1}; a transposed view has {1, lda} (Note [Matmul
    // operands] in src/ops/matmul.cpp).
    const md src({key.m, key.k}, dt::bf16,
                 key.ta ? dnnl::memory::dims{1, key.lda} : dnnl::memory::dims{key.lda, 1});
    const md weights({key.k, key.n}, dt::bf16,
                     key.tb ? dnnl::memory::dims{1, key.ldb} : dnnl::memory::dims{key.ldb, 1});
    const md dst({key.m, key.n}, key.float32_out ? dt::f32 : dt::bf16,
                 dnnl::memory::dims{key.n, 1});
    // Note [One primitive on several threads]: the caller's scratchpad, not the primitive's.
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights, dst), attr, cpu_engine());
    dnnl::matmul primitive(pd);
    return Bf16Gemm{std::move(pd), std::move(primitive)};
  });
}

Bf16Product::Bf16Product(i64 m, i64 n, i64 k, i64 lda, i64 ldb, bool ta, bool tb)
    : gemm_(bf16_gemm(Bf16GemmKey{m, n, k, lda, ldb, ta, tb, true})) {}

bool Bf16Product::run(const BFloat16* a, const BFloat16* b, float* c) const noexcept {
  try {
    run_onednn_matmul(gemm_->primitive, gemm_->pd, a, b, c);
    return true;
  } catch (...) {
    return false;
  }
}

namespace {

// bfloat16 a and b, out bfloat16 or float32.
void matmul_bf16(const Tensor& a, const Tensor& b, const Tensor& out) {
  const i64 batches = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  if (out.numel() == 0) return;
  char* c = impl_of(out).data();
  const std::size_t item = itemsize(kBFloat16), out_item = itemsize(out.dtype());
  if (k == 0) {  // an empty sum: zero bits are 0 in both dtypes
    std::memset(c, 0, static_cast<std::size_t>(out.numel()) * out_item);
    return;
  }
  const GemmOperand ga = gemm_operand(a), gb = gemm_operand(b);
  try {
    const Bf16GemmKey key{m, n, k, ga.ld, gb.ld, ga.trans, gb.trans, out.dtype() == kFloat32};
    const std::shared_ptr<const Bf16Gemm> gemm = bf16_gemm(key);
    for (i64 bi = 0; bi < batches; ++bi) {
      run_onednn_matmul(gemm->primitive, gemm->pd, ga.data + bi * ga.batch_stride * item,
                        gb.data + bi * gb.batch_stride * item, c + bi * m * n * out_item);
    }
  } catch (const dnnl::error& e) {
    TESSERA_CHECK(false, Error,
                  "[matmul] oneDNN's bfloat16 matmul failed for M={}, N={}, K={}: {} (status "
                  "{}). TESSERA_CPU_BF16_MATMUL=0 multiplies bfloat16 in float32 copies instead",
                  m, n, k, e.what(), static_cast<int>(e.status));
  }
}

}  // namespace

// Only the kernels built for AVX-512: a lower level (TESSERA_CPU_ISA=x86-64 in tests)
// computes as a CPU without it would, whatever this one has.
bool cpu_bf16_matmul_on() {
#if defined(__AVX512F__)
  static const bool on = [] {
    const char* env = std::getenv("TESSERA_CPU_BF16_MATMUL");
    return __builtin_cpu_supports("avx512bf16") && !(env != nullptr && std::strcmp(env, "0") == 0);
  }();
  return on;
#else
  return false;
#endif
}

bool CpuBackend::matmul_takes_half(Dtype dtype) const {
  return dtype == kBFloat16 && cpu_bf16_matmul_on();
}

void CpuBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  // cblas takes int sizes (oneDNN 64-bit ones); checked here so the error is not deferred
  // to the device's queue.
  const i64 m = out.size(1), n = out.size(2), k = a.size(2);
  if (out.numel() > 0 && k > 0) {
    const i64 lda = gemm_operand(a).ld, ldb = gemm_operand(b).ld;
    const i64 int_max = std::numeric_limits<int>::max();
    TESSERA_CHECK(a.dtype() == kBFloat16 ||
                      (out.dtype() == kFloat32 && m * n * k >= kDnnlMinWork) ||
                      std::max({m, n, k, lda, ldb}) <= int_max,
                  ShapeError,
                  "[matmul] sizes M={}, N={}, K={} (leading dims {}, {}) exceed OpenBLAS's "
                  "32-bit limit for {}; split the product into smaller blocks",
                  m, n, k, lda, ldb, dtype_name(out.dtype()));
  }
  const auto kernel = [](const Tensor& a, const Tensor& b, const Tensor& out) {
    if (a.dtype() == kBFloat16) return matmul_bf16(a, b, out);  // Note [CPU bfloat16 GEMM]
    dispatch_floating(out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      matmul_typed<T>(a, b, out);
    });
  };
  // Borrowed handles, queued or recorded: autograd sees none of them, so a product that
  // becomes a weight's gradient is kept as it is, not copied (accumulate in engine.cpp).
  launch_with(out.device().index(), kernel, a, b, out);
}

}  // namespace tessera::detail::TESSERA_CPU_ISA
