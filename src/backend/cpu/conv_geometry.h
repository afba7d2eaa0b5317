#pragma once
// The sizes of one CPU 2-D convolution, shared by its im2col and direct paths.
#include <cstdint>

#include "backend/backend.h"
#include "tessera/tensor.h"

namespace tessera::detail {

struct ConvGeometry {
  std::int64_t n, c, h, w, o, kh, kw, oh, ow;
  Window2d win;

  std::int64_t ck() const { return c * kh * kw; }
  std::int64_t positions() const { return oh * ow; }
  bool is_pointwise() const {  // 1x1, stride 1, no padding: col_n is x_n itself
    return kh == 1 && kw == 1 && win.stride_h == 1 && win.stride_w == 1 && win.pad_h == 0 &&
           win.pad_w == 0;
  }

  // x [N, C, H, W] and weight [O, C, kH, kW].
  static ConvGeometry of(const Tensor& x, const Tensor& weight, const Window2d& win) {
    const Shape& xs = x.shape();
    const Shape& ws = weight.shape();
    const std::int64_t oh = (xs[2] + 2 * win.pad_h - ws[2]) / win.stride_h + 1;
    const std::int64_t ow = (xs[3] + 2 * win.pad_w - ws[3]) / win.stride_w + 1;
    return {xs[0], xs[1], xs[2], xs[3], ws[0], ws[2], ws[3], oh, ow, win};
  }
};

}  // namespace tessera::detail
