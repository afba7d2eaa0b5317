#pragma once
// GPU convolutions on cuDNN, where it is loaded and takes the shape (Note [cuDNN at run
// time] in cudnn_conv.cpp); cuda_conv.cpp's im2col + cuBLAS does the rest.
#include <cuda_runtime.h>

#include "backend/backend.h"
#include "tessera/tensor.h"

namespace tessera::detail::cuda {

// conv2d (Backend::conv2d's contract) on `stream`, the current stream of out's device, which
// is current: true when cuDNN ran it, false (nothing queued) where it does not take it.
bool cudnn_conv2d(cudaStream_t stream, const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& out, const Window2d& w);

// The gradients of Backend::conv2d_backward that cuDNN wrote.
struct CudnnGradients {
  bool x = false, weight = false, bias = false;
};

// Writes those of the defined gradients that cuDNN takes for this shape (each direction has
// its own algorithm, and a direction without a deterministic one is left to im2col).
CudnnGradients cudnn_conv2d_backward(cudaStream_t stream, const Tensor& x, const Tensor& weight,
                                     const Tensor& grad_out, const Tensor& grad_x,
                                     const Tensor& grad_weight, const Tensor& grad_bias,
                                     const Window2d& w);

// Before a graph capture on `stream`: where cuDNN is loaded, makes sure the stream has a
// handle (made now: cudnnCreate cannot run inside the capture), so the captured convolutions
// take cuDNN as eager ones do. Loads nothing.
void cudnn_prepare_capture(cudaStream_t stream);

}  // namespace tessera::detail::cuda
