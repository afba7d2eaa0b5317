#pragma once
// The launchers of the CUDA kernels, callable from plain C++ (no CUDA headers needed here).
// cuda_backend.cpp turns Tensors into KernelArgs and calls these on the device's stream;
// each launcher queues its kernels on `stream` and returns at once (it never synchronizes).
// Launchers check their launches (TESSERA_CUDA_CHECK_LAUNCH in cuda_check.h).
#include <cstdint>
#include <span>

#include "backend/backend.h"
#include "backend/conv_geometry.h"
#include "tessera/dtype.h"
#include "tessera/shape.h"

namespace tessera::detail::cuda {

using StreamHandle = void*;  // a cudaStream_t

// A tensor as a kernel sees it: base pointer (offset applied), dtype, sizes and strides in
// elements. Views (transposed, sliced, expanded with stride 0) arrive as they are.
struct KernelArg {
  void* data = nullptr;
  Dtype dtype = kFloat32;
  int ndim = 0;
  std::int64_t sizes[kMaxDims] = {};
  std::int64_t strides[kMaxDims] = {};
  std::int64_t numel = 0;
  bool contiguous = true;
};

// ---- elementwise (kernels_elementwise.cu) ----
// Shapes: every operand has out's shape (already broadcast) and the compute dtype; out of
// comparisons is bool.
void launch_fill(StreamHandle s, const KernelArg& out, double value);
void launch_arange(StreamHandle s, const KernelArg& out, double start, double step);
// Same values as the CPU backend's (backend/philox.h): element i uses counter offset + i.
void launch_random(StreamHandle s, const KernelArg& out, RandomKind kind, double a, double b,
                   std::uint64_t seed, std::uint64_t offset);
void launch_unary(StreamHandle s, UnaryOp op, const KernelArg& in, const KernelArg& out);
// Same contract as Backend::unary_backward.
void launch_unary_backward(StreamHandle s, UnaryOp op, const KernelArg& grad,
                           const KernelArg& saved, const KernelArg& grad_in);
void launch_binary(StreamHandle s, BinaryOp op, const KernelArg& a, const KernelArg& b,
                   const KernelArg& out);
void launch_binary_scalar(StreamHandle s, BinaryOp op, const KernelArg& a, double scalar,
                          bool scalar_first, const KernelArg& out);
void launch_where(StreamHandle s, const KernelArg& cond, const KernelArg& a, const KernelArg& b,
                  const KernelArg& out);
// dst[i] = convert(src[i]); same shape, any strides and dtypes, both on this device (or
// src on a peer device whose memory this device can address).
void launch_copy(StreamHandle s, const KernelArg& src, const KernelArg& dst);

// ---- small matmuls (kernels_small_gemm.cu) ----
// Batched out [B, M, N] (contiguous) = a [B, M, K] @ b [B, K, N] for a and b of any strides
// (batch stride 0 broadcasts), float32 or float64, when small_gemm_fits.
inline constexpr std::int64_t kSmallGemmMax = 128;
bool small_gemm_fits(std::int64_t batches, std::int64_t m, std::int64_t n, std::int64_t k);
void launch_small_gemm(StreamHandle s, const KernelArg& a, const KernelArg& b,
                       const KernelArg& out);

// ---- reductions and softmax (kernels_reduce.cu) ----
// Same contract as Backend::reduce and Backend::softmax.
void launch_reduce(StreamHandle s, ReduceOp op, const KernelArg& in, std::uint32_t dim_mask,
                   const KernelArg& out);
void launch_softmax(StreamHandle s, const KernelArg& in, int dim, bool log, const KernelArg& out);
// Same contract as Backend::cross_entropy and Backend::cross_entropy_backward.
void launch_cross_entropy(StreamHandle s, const KernelArg& logits, const KernelArg& targets,
                          const KernelArg& losses, const KernelArg& probs);
void launch_cross_entropy_backward(StreamHandle s, const KernelArg& probs, const KernelArg& targets,
                                   const KernelArg& grad_losses, double divisor,
                                   const KernelArg& grad_logits);
// Backend::batch_norm, layer_norm and their backwards (kernels_norm.cu); a null pointer is an
// undefined tensor. `sums` is scratch of 2 C doubles on the stream's device.
void launch_batch_norm(StreamHandle s, const KernelArg& x, void* weight, void* bias,
                       void* running_mean, void* running_var, const KernelArg& y, void* save_mean,
                       void* save_invstd, const BatchNormParams& p);
void launch_layer_norm(StreamHandle s, const KernelArg& x, void* weight, void* bias, double eps,
                       const KernelArg& y, void* save_mean, void* save_invstd, std::int64_t rows);
// `partials`: 2 * layer_norm_row_blocks(rows, d) * d doubles of scratch when grad_weight or
// grad_bias is wanted (Note [Layer norm's parameter gradients on a GPU]).
void launch_layer_norm_backward(StreamHandle s, const KernelArg& x, void* weight,
                                const KernelArg& grad_y, void* save_mean, void* save_invstd,
                                std::int64_t rows, void* grad_x, void* grad_weight, void* grad_bias,
                                void* partials);
std::int64_t layer_norm_row_blocks(std::int64_t rows, std::int64_t d);
void launch_batch_norm_backward(StreamHandle s, const KernelArg& x, void* weight,
                                const KernelArg& grad_y, void* save_mean, void* save_invstd,
                                bool training, void* sums, void* grad_x, void* grad_weight,
                                void* grad_bias);

}  // namespace tessera::detail::cuda

namespace tessera::detail::cuda {

// ---- optimizer steps (kernels_optim.cu) ----
// Same contract as Backend::sgd_steps, adam_steps and unscale_grad: contiguous float32/float64
// tensors of one dtype; momentum_buf.data is nullptr when there is no momentum. The pointers
// are DeviceStepState's tensors on the device, nullptr when undefined.
struct StepFlags {
  const float* found_inf = nullptr;
  const double* step = nullptr;
  const float* first_step = nullptr;
};
struct SgdStepArg {
  KernelArg param, grad, momentum_buf;
  StepFlags flags;
  bool first_step = false;
};
struct AdamStepArg {
  KernelArg param, grad, m, v;
  StepFlags flags;
  AdamParams p;
};
// Every step of the list in one kernel per kMaxStepsPerLaunch of them (Note [One kernel for
// the parameters] in kernels_optim.cu).
void launch_sgd_steps(StreamHandle s, std::span<const SgdStepArg> steps, const SgdParams& p);
void launch_adam_steps(StreamHandle s, std::span<const AdamStepArg> steps);
void launch_unscale_grad(StreamHandle s, const KernelArg& grad, const float* inv_scale,
                         float* found_inf);

}  // namespace tessera::detail::cuda

namespace tessera::detail::cuda {

// ---- convolution helpers and pooling (kernels_conv.cu) ----
// See Note [CUDA convolution] in cuda_conv.cpp. All buffers are contiguous, of `dtype`
// (float32 or float64); P = OH * OW; a chunk is images [n0, n0 + nb).
// col [C*kH*kW, nb*P] from x [N, C, H, W].
void launch_im2col(StreamHandle s, Dtype dtype, const void* x, void* col, const ConvGeometry& g,
                   std::int64_t n0, std::int64_t nb);
// dx[n0 + n] = col2im(col) (overwritten) from col [C*kH*kW, nb*P].
void launch_col2im(StreamHandle s, Dtype dtype, const void* col, void* dx, const ConvGeometry& g,
                   std::int64_t n0, std::int64_t nb);
// out[n0 + n, o, p] = tmp[o, n*P + p] (+ bias[o] when bias is not null).
void launch_channels_to_images(StreamHandle s, Dtype dtype, const void* tmp, const void* bias,
                               void* out, const ConvGeometry& g, std::int64_t n0, std::int64_t nb);
// tmp[o, n*P + p] = grad[n0 + n, o, p].
void launch_images_to_channels(StreamHandle s, Dtype dtype, const void* grad, void* tmp,
                               const ConvGeometry& g, std::int64_t n0, std::int64_t nb);
// out[r] = sum_j in[r, j] (+ out[r] when accumulate), one block per row, fixed order.
void launch_row_sums(StreamHandle s, Dtype dtype, const void* in, void* out, std::int64_t rows,
                     std::int64_t cols, bool accumulate);
// Same contracts as Backend::pool2d and Backend::pool2d_backward.
void launch_pool2d(StreamHandle s, PoolKind kind, const KernelArg& x, const KernelArg& out,
                   void* indices, const Window2d& w);
void launch_pool2d_backward(StreamHandle s, PoolKind kind, const KernelArg& grad_out,
                            const void* indices, const KernelArg& grad_x, const Window2d& w);

}  // namespace tessera::detail::cuda

namespace tessera::detail::cuda {

// ---- indexing (kernels_index.cu) ----
// Where a kernel records an index it found out of range (Note [Indices checked by the
// kernel] in backend/indexing.h): mapped pinned host memory, one per GPU, that kernels write
// through its device address and the host reads after waiting for the GPU. `claimed` goes
// from 0 to 1 by atomicCAS in the one thread that then writes the rest and, after a system
// fence, sets `ready`: the host reads the record only once `ready` is set, and takes it by
// exchanging `ready` back to 0 (one thread reports it), then clears `claimed`.
struct IndexFault {
  unsigned int claimed;
  unsigned int ready;
  int op;   // an IndexOp (backend/indexing.h)
  int dim;  // the indexed dim
  std::int64_t value, position, size;
};
// Same contracts as Backend::index_select and Backend::index_add, for x (or target) seen as
// [outer, n, inner] around `dim` and an int64 index of k > 0 values; `fault` is the GPU's
// slot (its device address). With nothing to write (an empty slice), the indices are still
// checked, as the CPU checks them.
void launch_index_select(StreamHandle s, const KernelArg& x, const KernelArg& index,
                         const KernelArg& out, std::int64_t outer, std::int64_t n,
                         std::int64_t inner, int dim, IndexFault* fault);
// `scratch`: index_add_scratch_bytes(k, outer * inner) bytes (none when that is 0), for
// the sorted path of Note [index_add in sorted order].
void launch_index_add(StreamHandle s, const KernelArg& target, const KernelArg& index,
                      const KernelArg& source, std::int64_t outer, std::int64_t n,
                      std::int64_t inner, int dim, IndexFault* fault, void* scratch);
std::size_t index_add_scratch_bytes(std::int64_t k, std::int64_t columns);
// Same contract as Backend::random_int (kernels_random.cu).
void launch_random_int(StreamHandle s, const KernelArg& out, std::int64_t low, std::uint64_t span,
                       std::uint64_t seed, std::uint64_t offset);

}  // namespace tessera::detail::cuda
