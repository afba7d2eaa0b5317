// Small matmuls (every dim at most kSmallGemmMax) in one plain kernel. Their cost is the
// host's, not the GPU's: cuBLASLt spends several microseconds per call choosing and setting
// up, where a kernel launch costs one. See Note [Small matmuls].
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "core/dispatch.h"

// Note [Small matmuls]
// One block computes a 32x32 tile of C with 256 threads (each thread four rows of one
// column), stepping over k in tiles of 32 staged in shared memory (padded against bank
// conflicts). Operands are read through their strides, so transposed and broadcast (batch
// stride 0) views need no copy. Each output is a sequential fused multiply-add over k in
// the operands' type: exact float32, like cuBLAS's CUBLAS_COMPUTE_32F.

namespace tessera::detail::cuda {
namespace {

using i64 = std::int64_t;
constexpr int kTile = 32, kRowsPerThread = 4, kThreads = kTile * kTile / kRowsPerThread;

struct SmallGemm {
  i64 m, n, k;
  i64 a_batch, a_row, a_col;  // element strides
  i64 b_batch, b_row, b_col;
  i64 c_batch;  // C is contiguous [batches, m, n]
};

template <typename T>
__global__ void __launch_bounds__(kThreads)
    small_gemm_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c,
                      const SmallGemm g) {
  __shared__ T as[kTile][kTile + 1];                             // as[i][p]
  __shared__ T bs[kTile][kTile + 1];                             // bs[p][j]
  const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;  // ty: 0 .. 7
  constexpr int kStep = kThreads / kTile;
  const i64 i0 = static_cast<i64>(blockIdx.y) * kTile, j0 = static_cast<i64>(blockIdx.x) * kTile;
  a += blockIdx.z * g.a_batch;
  b += blockIdx.z * g.b_batch;
  c += blockIdx.z * g.c_batch;
  T acc[kRowsPerThread] = {};
  for (i64 p0 = 0; p0 < g.k; p0 += kTile) {
    for (int r = ty; r < kTile; r += kStep) {
      const i64 i = i0 + r, p = p0 + tx;
      as[r][tx] = i < g.m && p < g.k ? a[i * g.a_row + p * g.a_col] : T(0);
      const i64 q = p0 + r, j = j0 + tx;
      bs[r][tx] = q < g.k && j < g.n ? b[q * g.b_row + j * g.b_col] : T(0);
    }
    __syncthreads();
#pragma unroll
    for (int q = 0; q < kTile; ++q) {
      const T bv = bs[q][tx];
#pragma unroll
      for (int u = 0; u < kRowsPerThread; ++u) acc[u] = fma(as[ty + u * kStep][q], bv, acc[u]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int u = 0; u < kRowsPerThread; ++u) {
    const i64 i = i0 + ty + u * kStep, j = j0 + tx;
    if (i < g.m && j < g.n) c[i * g.n + j] = acc[u];
  }
}

}  // namespace

bool small_gemm_fits(i64 batches, i64 m, i64 n, i64 k) {
  return m <= kSmallGemmMax && n <= kSmallGemmMax && k <= kSmallGemmMax && batches <= 65535;
}

void launch_small_gemm(StreamHandle s, const KernelArg& a, const KernelArg& b,
                       const KernelArg& out) {
  const auto stream = static_cast<cudaStream_t>(s);
  const SmallGemm g{
      out.sizes[1], out.sizes[2], a.sizes[2],   a.strides[0], a.strides[1],
      a.strides[2], b.strides[0], b.strides[1], b.strides[2], out.sizes[1] * out.sizes[2]};
  const dim3 grid(static_cast<unsigned>((g.n + kTile - 1) / kTile),
                  static_cast<unsigned>((g.m + kTile - 1) / kTile),
                  static_cast<unsigned>(out.sizes[0]));
  if (is_half(out.dtype)) half_reached_kernel(out.dtype);  // the front end widens
  if (out.dtype == kFloat64) {
    small_gemm_kernel<double><<<grid, kThreads, 0, stream>>>(static_cast<const double*>(a.data),
                                                             static_cast<const double*>(b.data),
                                                             static_cast<double*>(out.data), g);
  } else {
    small_gemm_kernel<float><<<grid, kThreads, 0, stream>>>(static_cast<const float*>(a.data),
                                                            static_cast<const float*>(b.data),
                                                            static_cast<float*>(out.data), g);
  }
  TESSERA_CUDA_CHECK_LAUNCH(stream, "matmul (small)");
}

}  // namespace tessera::detail::cuda
