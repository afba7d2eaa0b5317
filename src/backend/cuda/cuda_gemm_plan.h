#pragma once
// Matmuls through cuBLASLt with their descriptors and algorithm chosen once per shape. See
// Note [cuBLASLt plans] in cuda_gemm_plan.cpp.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace tessera::detail {

// One GEMM as cuBLAS sees it (column-major, after Note [cuBLAS operands]'s swap):
// C[m x n] = op_a(A) op_b(B), `batches` times with the given element strides.
struct GemmShape {
  cublasOperation_t op_a, op_b;
  std::int64_t m, n, k, lda, ldb, ldc, batches, stride_a, stride_b, stride_c;
  cudaDataType type;      // A and B
  cudaDataType out_type;  // C (and D): type, or float32 sums of half operands
  cublasComputeType_t compute;
  // Alignment of the A, B and C pointers in bytes (a power of two up to 256): views may
  // start anywhere, and an algorithm picked for aligned pointers may need them.
  std::uint32_t align_a, align_b, align_c;
  bool operator==(const GemmShape&) const = default;
};

// The alignment to record for `p`: the largest power of two dividing it, at most 256.
std::uint32_t pointer_alignment(const void* p);

class GemmPlans {
 public:
  GemmPlans() = default;
  ~GemmPlans();
  GemmPlans(const GemmPlans&) = delete;
  GemmPlans& operator=(const GemmPlans&) = delete;

  // Queues C = alpha op_a(A) op_b(B) + beta C on `stream` with the plan for `shape` (made on
  // first use). False when cuBLASLt offers no algorithm for it: the caller uses cuBLAS.
  bool run(const GemmShape& shape, const void* alpha, const void* a, const void* b,
           const void* beta, void* c, void* workspace, std::size_t workspace_bytes,
           cudaStream_t stream);
  // Makes the cuBLASLt handle now (before a graph capture) if run has not made it yet.
  void create_handle();

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool ok = false;
  };
  struct Hash {
    std::size_t operator()(const GemmShape& s) const;
  };
  const Plan& plan(const GemmShape& shape, std::size_t workspace_bytes);

  std::mutex mutex_;
  cublasLtHandle_t lt_ = nullptr;
  std::unordered_map<GemmShape, Plan, Hash> plans_;
};

}  // namespace tessera::detail
