#include "backend/cuda/cuda_gemm_plan.h"

#include "backend/cuda/cuda_check.h"

// Note [cuBLASLt plans]
// cublasGemmEx looks its algorithm up again on every call, which costs the host ~10 us: as
// much as the whole kernel for the small products of a training step or of the seed's
// 100x100 exercise. cuBLASLt takes the descriptors and the algorithm as arguments, so each
// GPU keeps them per shape (a model has a handful of shapes) and a call only queues the
// kernel. The algorithm is cuBLASLt's first heuristic pick for the workspace we give it,
// the same one cublasGemmEx would take. Plans live as long as the process.

namespace tessera::detail {
namespace {

// Each attribute has its own type: the batch count is int32_t, the stride int64_t.
template <typename T>
void set_attr(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr, T value) {
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, attr, &value, sizeof(value)));
}

// The layout of an operand that is `rows` x `cols` (column-major) before its op.
cublasLtMatrixLayout_t layout(cudaDataType type, std::int64_t rows, std::int64_t cols,
                              std::int64_t ld, std::int64_t batches, std::int64_t stride) {
  cublasLtMatrixLayout_t l;
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, static_cast<std::uint64_t>(rows),
                                                  static_cast<std::uint64_t>(cols), ld));
  if (batches > 1) {
    set_attr(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, static_cast<std::int32_t>(batches));
    set_attr(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride);
  }
  return l;
}

void set_min_alignment(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                       std::uint32_t bytes) {
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &bytes, sizeof(bytes)));
}

}  // namespace

std::uint32_t pointer_alignment(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

std::size_t GemmPlans::Hash::operator()(const GemmShape& s) const {
  std::size_t h = static_cast<std::size_t>(s.op_a) * 31 + static_cast<std::size_t>(s.op_b);
  for (std::int64_t v :
       {s.m, s.n, s.k, s.lda, s.ldb, s.ldc, s.batches, s.stride_a, s.stride_b, s.stride_c,
        static_cast<std::int64_t>(s.type), static_cast<std::int64_t>(s.out_type),
        static_cast<std::int64_t>(s.compute), std::int64_t{s.align_a}, std::int64_t{s.align_b},
        std::int64_t{s.align_c}}) {
    h = h * 1000003u ^ static_cast<std::size_t>(v);
  }
  return h;
}

const GemmPlans::Plan& GemmPlans::plan(const GemmShape& s, std::size_t workspace_bytes) {
  std::lock_guard lock(mutex_);
  if (auto it = plans_.find(s); it != plans_.end()) return it->second;
  if (lt_ == nullptr) TESSERA_CUBLAS_CHECK(cublasLtCreate(&lt_));
  Plan p;
  if (s.batches > INT32_MAX) return plans_.emplace(s, p).first->second;  // cuBLAS's 64-bit API
  const cudaDataType scale = s.compute == CUBLAS_COMPUTE_64F ? CUDA_R_64F : CUDA_R_32F;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, s.compute, scale));
  TESSERA_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &s.op_a, sizeof(s.op_a)));
  TESSERA_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &s.op_b, sizeof(s.op_b)));
  const bool ta = s.op_a != CUBLAS_OP_N, tb = s.op_b != CUBLAS_OP_N;
  p.a = layout(s.type, ta ? s.k : s.m, ta ? s.m : s.k, s.lda, s.batches, s.stride_a);
  p.b = layout(s.type, tb ? s.n : s.k, tb ? s.k : s.n, s.ldb, s.batches, s.stride_b);
  p.c = layout(s.out_type, s.m, s.n, s.ldc, s.batches, s.stride_c);
  cublasLtMatmulPreference_t pref;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const std::uint64_t ws = workspace_bytes;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  set_min_alignment(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, s.align_a);
  set_min_alignment(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, s.align_b);
  set_min_alignment(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, s.align_c);
  set_min_alignment(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, s.align_c);
  if (s.out_type == CUDA_R_16BF || s.out_type == CUDA_R_16F) {
    // A split-K algorithm sums its partial results in float32, not in the half output, so
    // the sum is rounded once (Note [CUDA half GEMM]); algorithms without split-K still pass.
    const std::uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof(schemes)));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(lt_, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  // No algorithm (or an unsupported layout) is not an error: cuBLAS handles the shape.
  p.ok = status == CUBLAS_STATUS_SUCCESS && found > 0;
  if (p.ok) p.algo = result.algo;
  return plans_.emplace(s, p).first->second;
}

void GemmPlans::create_handle() {
  std::lock_guard lock(mutex_);
  if (lt_ == nullptr) TESSERA_CUBLAS_CHECK(cublasLtCreate(&lt_));
}

bool GemmPlans::run(const GemmShape& shape, const void* alpha, const void* a, const void* b,
                    const void* beta, void* c, void* workspace, std::size_t workspace_bytes,
                    cudaStream_t stream) {
  const Plan& p = plan(shape, workspace_bytes);
  if (!p.ok) return false;
  TESSERA_CUBLAS_CHECK(cublasLtMatmul(lt_, p.desc, alpha, a, p.a, b, p.b, beta, c, p.c, c, p.c,
                                      &p.algo, workspace, workspace_bytes, stream));
  return true;
}

GemmPlans::~GemmPlans() {
  for (auto& [shape, p] : plans_) {
    (void)cublasLtMatrixLayoutDestroy(p.a);
    (void)cublasLtMatrixLayoutDestroy(p.b);
    (void)cublasLtMatrixLayoutDestroy(p.c);
    (void)cublasLtMatmulDescDestroy(p.desc);
  }
  if (lt_ != nullptr) (void)cublasLtDestroy(lt_);
}

}  // namespace tessera::detail
