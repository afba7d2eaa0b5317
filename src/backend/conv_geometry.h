#pragma once
// The sizes of one 2-D convolution, for every backend: the CPU's three algorithms
// (backend/cpu/conv/) and the CUDA backend (cuda_conv.cpp, and kernels_conv.cu, which nvcc
// compiles: so it includes no more than kernels.h does, and its functions are constexpr).
#include <cstdint>

#include "backend/backend.h"
#include "tessera/shape.h"

namespace tessera::detail {

struct ConvGeometry {
  std::int64_t n, c, h, w, o, kh, kw, oh, ow;
  Window2d win;

  constexpr std::int64_t ck() const { return c * kh * kw; }
  constexpr std::int64_t positions() const { return oh * ow; }
  constexpr bool is_pointwise() const {  // 1x1, stride 1, no padding: col_n is x_n itself
    return kh == 1 && kw == 1 && win.stride_h == 1 && win.stride_w == 1 && win.pad_h == 0 &&
           win.pad_w == 0;
  }

  // x [N, C, H, W] and weight [O, C, kH, kW] (shapes the front end has checked).
  static ConvGeometry of(const Shape& x, const Shape& weight, const Window2d& win) {
    const std::int64_t oh = (x[2] + 2 * win.pad_h - weight[2]) / win.stride_h + 1;
    const std::int64_t ow = (x[3] + 2 * win.pad_w - weight[3]) / win.stride_w + 1;
    return {x[0], x[1], x[2], x[3], weight[0], weight[2], weight[3], oh, ow, win};
  }
};

}  // namespace tessera::detail
