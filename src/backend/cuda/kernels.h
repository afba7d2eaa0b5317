#pragma once
// The launchers of the CUDA kernels, callable from plain C++ (no CUDA headers needed here).
// cuda_backend.cpp turns Tensors into KernelArgs and calls these on the device's stream;
// each launcher queues its kernels on `stream` and returns at once (it never synchronizes).
// Launchers check their launches (TESSERA_CUDA_CHECK_LAUNCH in cuda_check.h).
#include <cstdint>

#include "backend/backend.h"
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
void launch_binary(StreamHandle s, BinaryOp op, const KernelArg& a, const KernelArg& b,
                   const KernelArg& out);
void launch_binary_scalar(StreamHandle s, BinaryOp op, const KernelArg& a, double scalar,
                          bool scalar_first, const KernelArg& out);
void launch_where(StreamHandle s, const KernelArg& cond, const KernelArg& a, const KernelArg& b,
                  const KernelArg& out);
// dst[i] = convert(src[i]); same shape, any strides and dtypes, both on this device (or
// src on a peer device whose memory this device can address).
void launch_copy(StreamHandle s, const KernelArg& src, const KernelArg& dst);

// ---- reductions and softmax (kernels_reduce.cu) ----
// Same contract as Backend::reduce and Backend::softmax.
void launch_reduce(StreamHandle s, ReduceOp op, const KernelArg& in, std::uint32_t dim_mask,
                   const KernelArg& out);
void launch_softmax(StreamHandle s, const KernelArg& in, int dim, bool log, const KernelArg& out);
// Same contract as Backend::cross_entropy and Backend::cross_entropy_backward.
void launch_cross_entropy(StreamHandle s, const KernelArg& logits, const KernelArg& targets,
                          const KernelArg& losses, const KernelArg& probs);
void launch_cross_entropy_backward(StreamHandle s, const KernelArg& probs,
                                   const KernelArg& targets, const KernelArg& grad_losses,
                                   const KernelArg& grad_logits);

}  // namespace tessera::detail::cuda

namespace tessera::detail::cuda {

// ---- optimizer steps (kernels_optim.cu) ----
// Same contract as Backend::sgd_step and Backend::adam_step: contiguous float32/float64
// tensors of one dtype and size; momentum_buf.data is nullptr when there is no momentum.
void launch_sgd_step(StreamHandle s, const KernelArg& param, const KernelArg& grad,
                     const KernelArg& momentum_buf, const SgdParams& p);
void launch_adam_step(StreamHandle s, const KernelArg& param, const KernelArg& grad,
                      const KernelArg& m, const KernelArg& v, const AdamParams& p);

}  // namespace tessera::detail::cuda
