#pragma once
// Direct CPU convolution for stride 1 and small channel counts (LeNet's 1->6 and 6->16):
// no im2col matrix and no GEMM call per image. See Note [Direct convolution] in
// direct_conv.cpp. Both functions split the batch across the OpenMP pool themselves.
#include "backend/conv_geometry.h"

namespace tessera::detail::TESSERA_CPU_ISA {  // kernels only: cpu_backend.h

// Whether the direct path handles g (stride 1, not 1x1, few channels, little wasted work);
// otherwise cpu_conv.cpp uses im2col + GEMM (im2col_conv.h).
bool direct_conv_applies(const ConvGeometry& g);

// y [N, O, OH, OW] = conv(x [N, C, H, W], w [O, C, kH, kW]) + b [O] (b may be null).
template <typename T>
void direct_conv_forward(const ConvGeometry& g, const T* x, const T* w, const T* b, T* y);

// From gy [N, O, OH, OW]: dx [N, C, H, W], dw [O, C, kH, kW] and db [O], each overwritten,
// and skipped when null.
template <typename T>
void direct_conv_backward(const ConvGeometry& g, const T* x, const T* w, const T* gy, T* dx, T* dw,
                          T* db);

}  // namespace tessera::detail::TESSERA_CPU_ISA
