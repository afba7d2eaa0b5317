#pragma once
/// 2-D convolution and pooling over NCHW tensors, like torch.nn.functional's conv2d,
/// max_pool2d and avg_pool2d (no dilation or groups). Floating dtypes; all operands on one
/// device. Differentiable (first order).
#include <array>

#include "tessera/export.h"
#include "tessera/tensor.h"

namespace tessera {

struct TESSERA_API Conv2dOptions {
  std::array<int, 2> stride{1, 1};   ///< {along H, along W}
  std::array<int, 2> padding{0, 0};  ///< zeros added on each side
};

/// x [N, C, H, W], weight [O, C, kH, kW], bias [O] or undefined; out [N, O, OH, OW] with
/// OH = (H + 2 padding - kH) / stride + 1. Cross-correlation, as every framework computes.
TESSERA_API Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
                          Conv2dOptions options = {});

struct TESSERA_API Pool2dOptions {
  std::array<int, 2> kernel{2, 2};
  std::array<int, 2> stride{0, 0};   ///< 0 = the kernel size (non-overlapping windows)
  std::array<int, 2> padding{0, 0};  ///< at most half the kernel
};

/// Maximum over each window; padding never wins (it counts as -inf). NaN propagates; the
/// gradient goes to the first of equal maxima, or to the window's first NaN (PyTorch's to
/// its last NaN). ShapeError for an input with a 0-row or 0-column plane.
TESSERA_API Tensor max_pool2d(const Tensor& x, Pool2dOptions options = {});
/// Mean over each window, padding counted as zeros in the divisor (count_include_pad).
TESSERA_API Tensor avg_pool2d(const Tensor& x, Pool2dOptions options = {});

}  // namespace tessera
