// CUDA convolution and pooling: im2col + one cuBLAS GEMM per chunk of images. See Note
// [CUDA convolution].
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>

#include "backend/conv_geometry.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cudnn_conv.h"
#include "core/check.h"
#include "core/dispatch.h"
#include "core/tensor_impl.h"
#include "tessera/settings.h"

// Note [CUDA convolution]
// Images are processed in chunks of nb. im2col lays a chunk out as col [C*kH*kW, nb*P]
// (P = OH*OW), so each step is one large GEMM rather than nb small ones:
//   forward:  tmp [O, nb*P] = W [O, CK] @ col, then tmp -> out [n, O, P] with the bias added;
//   backward: gt [O, nb*P] <- grad_out, dW (+)= gt @ col^T, db (+)= row sums of gt,
//             dcol = W^T @ gt, then col2im writes dx for the chunk.
// float32 convolutions take cuDNN's kernels instead where cuDNN is loaded and takes the shape
// (Note [cuDNN at run time] in cudnn_conv.cpp). Chunks keep col within kColBudget elements.
// Temporaries are tessera tensors (an OOM is OutOfMemoryError); freeing them when this function
// returns is safe because the caching allocator hands blocks out again only to work queued later on
// the same stream.

namespace tessera::detail {
namespace {

using i64 = std::int64_t;

constexpr i64 kColBudget = i64{1} << 26;  // elements of col per chunk (256 MiB in float32)

i64 chunk_images(const ConvGeometry& g) {
  const i64 per_image = std::max<i64>(g.ck(), g.o) * g.positions();
  const i64 nb = std::clamp<i64>(kColBudget / std::max<i64>(per_image, 1), 1, g.n);
  TESSERA_CHECK(per_image <= std::numeric_limits<int>::max(), ShapeError,
                "[conv2d] one image needs a {}-element im2col buffer, past cuBLAS's 32-bit "
                "sizes; use smaller images or fewer channels",
                per_image);
  return nb;
}

// Row-major C [m, n] = op(A) op(B) + beta C through column-major cuBLAS (see Note [cuBLAS
// operands] in cuda_matmul.cpp: swap the operands, keep the flags).
void gemm(cublasHandle_t handle, Dtype dtype, bool ta, bool tb, i64 m, i64 n, i64 k, const void* a,
          i64 lda, const void* b, i64 ldb, double beta, void* c, i64 ldc) {
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  if (is_half(dtype)) half_reached_kernel(dtype);  // the front end widens
  if (dtype == kFloat64) {
    const double alpha = 1;
    TESSERA_CUBLAS_CHECK(cublasDgemm(handle, opb, opa, ni, mi, ki, &alpha,
                                     static_cast<const double*>(b), static_cast<int>(ldb),
                                     static_cast<const double*>(a), static_cast<int>(lda), &beta,
                                     static_cast<double*>(c), static_cast<int>(ldc)));
  } else {
    // TF32 tensor cores under the matmul switch (settings.h), as float32 matmul.
    const float alpha = 1, beta_f = static_cast<float>(beta);
    const cublasComputeType_t compute =
        matmul_allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    TESSERA_CUBLAS_CHECK(cublasGemmEx(handle, opb, opa, ni, mi, ki, &alpha, b, CUDA_R_32F,
                                      static_cast<int>(ldb), a, CUDA_R_32F, static_cast<int>(lda),
                                      &beta_f, c, CUDA_R_32F, static_cast<int>(ldc), compute,
                                      CUBLAS_GEMM_DEFAULT));
  }
}

void* ptr(const Tensor& t) { return t.defined() ? impl_of(t).data() : nullptr; }

}  // namespace

void CudaBackend::conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                         const Tensor& out, const Window2d& w) {
  const ConvGeometry g = ConvGeometry::of(x.shape(), weight.shape(), w);
  if (out.numel() == 0) return;
  const int index = out.device().index();
  const cudaStream_t stream = activate(index);
  if (cuda::cudnn_conv2d(stream, x, weight, bias, out, w)) return;
  const Dtype dtype = out.dtype();
  const i64 ck = g.ck(), p = g.positions(), nb_max = chunk_images(g);
  const Tensor col = make_tensor({ck, nb_max * p}, dtype, out.device(), "conv2d");
  const Tensor tmp = make_tensor({g.o, nb_max * p}, dtype, out.device(), "conv2d");
  for (i64 n0 = 0; n0 < g.n; n0 += nb_max) {
    const i64 nb = std::min(nb_max, g.n - n0);
    if (ck == 0) {
      TESSERA_CUDA_CHECK(cudaMemsetAsync(ptr(tmp), 0, g.o * nb * p * itemsize(dtype), stream));
    } else {
      cuda::launch_im2col(stream, dtype, ptr(x), ptr(col), g, n0, nb);
      gemm(cublas(index), dtype, false, false, g.o, nb * p, ck, ptr(weight), ck, ptr(col), nb * p,
           0, ptr(tmp), nb * p);
    }
    cuda::launch_channels_to_images(stream, dtype, ptr(tmp), ptr(bias), ptr(out), g, n0, nb);
  }
}

void CudaBackend::conv2d_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_out,
                                  const Tensor& wanted_grad_x, const Tensor& wanted_grad_weight,
                                  const Tensor& wanted_grad_bias, const Window2d& w) {
  const ConvGeometry g = ConvGeometry::of(x.shape(), weight.shape(), w);
  const int index = x.device().index();
  const cudaStream_t stream = activate(index);
  // What cuDNN wrote is done; im2col below writes the rest (undefined: not wanted or done).
  const cuda::CudnnGradients done = cuda::cudnn_conv2d_backward(
      stream, x, weight, grad_out, wanted_grad_x, wanted_grad_weight, wanted_grad_bias, w);
  const Tensor grad_x = done.x ? Tensor() : wanted_grad_x;
  const Tensor grad_weight = done.weight ? Tensor() : wanted_grad_weight;
  const Tensor grad_bias = done.bias ? Tensor() : wanted_grad_bias;
  if (!grad_x.defined() && !grad_weight.defined() && !grad_bias.defined()) return;
  const Dtype dtype = x.dtype();
  const i64 ck = g.ck(), p = g.positions();
  if (g.n == 0 || p == 0 || ck == 0) {  // empty sums: every gradient is zero
    for (const Tensor* t : {&grad_x, &grad_weight, &grad_bias}) {
      if (t->defined()) TESSERA_CUDA_CHECK(cudaMemsetAsync(ptr(*t), 0, t->nbytes(), stream));
    }
    return;
  }
  const i64 nb_max = chunk_images(g);  // after the empty case: it clamps to [1, n]
  // Columns only for what needs them (not when cuDNN left just the bias gradient).
  const Tensor col = grad_weight.defined() || grad_x.defined()
                         ? make_tensor({ck, nb_max * p}, dtype, x.device(), "conv2d_backward")
                         : Tensor();
  const Tensor gt = make_tensor({g.o, nb_max * p}, dtype, x.device(), "conv2d_backward");
  for (i64 n0 = 0; n0 < g.n; n0 += nb_max) {
    const i64 nb = std::min(nb_max, g.n - n0);
    const bool first = n0 == 0;
    cuda::launch_images_to_channels(stream, dtype, ptr(grad_out), ptr(gt), g, n0, nb);
    if (grad_weight.defined()) {
      cuda::launch_im2col(stream, dtype, ptr(x), ptr(col), g, n0, nb);
      gemm(cublas(index), dtype, false, true, g.o, ck, nb * p, ptr(gt), nb * p, ptr(col), nb * p,
           first ? 0 : 1, ptr(grad_weight), ck);
    }
    if (grad_bias.defined()) {
      cuda::launch_row_sums(stream, dtype, ptr(gt), ptr(grad_bias), g.o, nb * p, !first);
    }
    if (grad_x.defined()) {
      gemm(cublas(index), dtype, true, false, ck, nb * p, g.o, ptr(weight), ck, ptr(gt), nb * p, 0,
           ptr(col), nb * p);
      cuda::launch_col2im(stream, dtype, ptr(col), ptr(grad_x), g, n0, nb);
    }
  }
}

void CudaBackend::pool2d(PoolKind kind, const Tensor& x, const Tensor& out, const Tensor& indices,
                         const Window2d& w) {
  cuda::launch_pool2d(activate(out.device().index()), kind, kernel_arg(x), kernel_arg(out),
                      ptr(indices), w);
}

void CudaBackend::pool2d_backward(PoolKind kind, const Tensor& grad_out, const Tensor& indices,
                                  const Tensor& grad_x, const Window2d& w) {
  cuda::launch_pool2d_backward(activate(grad_x.device().index()), kind, kernel_arg(grad_out),
                               ptr(indices), kernel_arg(grad_x), w);
}

}  // namespace tessera::detail
