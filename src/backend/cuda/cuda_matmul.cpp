// CUDA matmul: small products in one tiled kernel of ours (kernels_small_gemm.cu), the rest
// one (batched) GEMM each through cuBLASLt with a plan cached per shape (cuda_gemm_plan.h),
// or cuBLAS where cuBLASLt has no algorithm. See Note [cuBLAS operands].
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "core/check.h"
#include "core/dispatch.h"
#include "tessera/settings.h"

// Note [cuBLAS operands]
// cuBLAS is column-major and tessera row-major. A row-major M x N matrix C is the
// column-major N x M matrix C^T, and C^T = B^T A^T, so cuBLAS computes (N, M, K) with B
// first and A second. A row-major operand (column stride 1, row stride ld) read
// column-major is its own transpose: op N with that ld. A transposed view (row stride 1,
// column stride ld, see Note [Matmul operands] in src/ops/matmul.cpp) read column-major is
// the matrix itself: op T with ld = its column stride. That is the same (trans, ld) pair the
// CPU's row-major BLAS call uses. Batch stride 0 (a broadcast operand) is legal in cuBLAS.
// float32 uses CUBLAS_COMPUTE_32F (exact float32 products and sums) unless
// set_matmul_allow_tf32(true), then CUBLAS_COMPUTE_32F_FAST_TF32.
//
// Note [CUDA half GEMM]
// bfloat16 and float16 operands go to cuBLASLt as they are (CUDA_R_16BF, CUDA_R_16F) with
// CUBLAS_COMPUTE_32F: exact products summed in float32 on the tensor cores, rounded once into
// a half output, or written unrounded into a float32 one (detail::half_product_float32, for
// a Linear that adds its bias before rounding). These are the combinations cuBLASLt
// documents for 16-bit inputs and 32-bit compute, and what Note [Half precision] promises of
// the front end's float32 path, without its float32 copies of the operands. They skip our
// small-matmul kernel, which is float32 only. TESSERA_CUDA_HALF_MATMUL=0 goes back to the
// float32 copies.

namespace tessera::detail {
namespace {

using i64 = std::int64_t;

struct GemmOperand {
  cublasOperation_t op;
  i64 ld;
  i64 batch_stride;
  const void* data;
};

GemmOperand gemm_operand(const cuda::KernelArg& t) {
  const bool trans = t.strides[2] != 1;
  TESSERA_INTERNAL_ASSERT(!trans || t.strides[1] == 1,
                          "matmul operand strides [{}, {}, {}] are not BLAS-able", t.strides[0],
                          t.strides[1], t.strides[2]);
  return {trans ? CUBLAS_OP_T : CUBLAS_OP_N, trans ? t.strides[2] : t.strides[1], t.strides[0],
          t.data};
}

cudaDataType cuda_type(Dtype dtype) {
  switch (dtype) {
    case kFloat64:
      return CUDA_R_64F;
    case kBFloat16:
      return CUDA_R_16BF;
    case kFloat16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

}  // namespace

bool CudaBackend::matmul_takes_half(Dtype dtype) const {
  static const bool on = [] {
    const char* env = std::getenv("TESSERA_CUDA_HALF_MATMUL");
    return !(env != nullptr && std::strcmp(env, "0") == 0);
  }();
  return on && is_half(dtype);  // Note [CUDA half GEMM]
}

void CudaBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  const cuda::KernelArg ka = kernel_arg(a), kb = kernel_arg(b), kc = kernel_arg(out);
  const i64 batches = kc.sizes[0], m = kc.sizes[1], n = kc.sizes[2], k = ka.sizes[2];
  if (kc.numel == 0) return;
  const cudaStream_t stream = activate(out.device().index());
  if (k == 0) {  // an empty sum; cuBLAS would also reject the leading dimensions
    TESSERA_CUDA_CHECK(cudaMemsetAsync(
        kc.data, 0, static_cast<std::size_t>(kc.numel) * itemsize(kc.dtype), stream));
    return;
  }
  TESSERA_INTERNAL_ASSERT(kc.contiguous, "matmul output must be contiguous");
  const bool half = is_half(ka.dtype);  // Note [CUDA half GEMM]
  if (half && !matmul_takes_half(ka.dtype)) half_reached_kernel(ka.dtype);
  TESSERA_INTERNAL_ASSERT(kc.dtype == ka.dtype || (half && kc.dtype == kFloat32),
                          "matmul of {} into {}", dtype_name(ka.dtype), dtype_name(kc.dtype));
  if (!half && cuda::small_gemm_fits(batches, m, n, k)) {  // Note [Small matmuls]
    cuda::launch_small_gemm(stream, ka, kb, kc);
    return;
  }
  const GemmOperand ga = gemm_operand(ka), gb = gemm_operand(kb);
  const bool dbl = kc.dtype == kFloat64;
  const cudaDataType type = cuda_type(ka.dtype), out_type = cuda_type(kc.dtype);
  const cublasComputeType_t compute = dbl                            ? CUBLAS_COMPUTE_64F
                                      : !half && matmul_allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                     : CUBLAS_COMPUTE_32F;
  // alpha and beta are host scalars of the compute type (CUBLAS_POINTER_MODE_HOST, the
  // handle's default).
  const float alpha_f = 1.0f, beta_f = 0.0f;
  const double alpha_d = 1.0, beta_d = 0.0;
  const void* alpha = dbl ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = dbl ? static_cast<const void*>(&beta_d) : &beta_f;
  // C^T (N x M, ldc N) = op(B)^T-view * op(A)^T-view; see Note [cuBLAS operands].
  const int index = out.device().index();
  // cuBLASLt with a cached plan (Note [cuBLASLt plans]); a broadcast operand (batch stride
  // 0) stays with cuBLAS, which documents that case.
  if (batches == 1 || (ga.batch_stride != 0 && gb.batch_stride != 0)) {
    // cuBLAS's m and n are tessera's n and m (Note [cuBLAS operands]).
    const GemmShape shape{.op_a = gb.op,
                          .op_b = ga.op,
                          .m = n,
                          .n = m,
                          .k = k,
                          .lda = gb.ld,
                          .ldb = ga.ld,
                          .ldc = n,
                          .batches = batches,
                          .stride_a = gb.batch_stride,
                          .stride_b = ga.batch_stride,
                          .stride_c = m * n,
                          .type = type,
                          .out_type = out_type,
                          .compute = compute,
                          .align_a = pointer_alignment(gb.data),
                          .align_b = pointer_alignment(ga.data),
                          .align_c = pointer_alignment(kc.data)};
    if (gemm_plans(index).run(shape, alpha, gb.data, ga.data, beta, kc.data,
                              cublas_workspace(index), kCublasWorkspace, stream)) {
      return;
    }
  }
  if (batches == 1) {  // the plain GEMM entry point, as PyTorch's mm uses
    TESSERA_CUBLAS_CHECK(cublasGemmEx_64(cublas(out.device().index()), gb.op, ga.op, n, m, k, alpha,
                                         gb.data, type, gb.ld, ga.data, type, ga.ld, beta, kc.data,
                                         out_type, n, compute, CUBLAS_GEMM_DEFAULT));
    return;
  }
  TESSERA_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
      cublas(out.device().index()), gb.op, ga.op, n, m, k, alpha, gb.data, type, gb.ld,
      gb.batch_stride, ga.data, type, ga.ld, ga.batch_stride, beta, kc.data, out_type, n, m * n,
      batches, compute, CUBLAS_GEMM_DEFAULT));
}

}  // namespace tessera::detail
