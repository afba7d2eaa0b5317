#pragma once
// CPU 2-D convolutions on oneDNN's convolution primitives (Note [oneDNN convolutions] in
// onednn_conv.cpp). Built once for every CPU, not per instruction-set level, as
// onednn_matmul.h is: oneDNN picks its own instructions.
#include "backend/conv_geometry.h"

namespace tessera::detail {

// The element types oneDNN convolves here: float32, and bfloat16 where the CPU multiplies it
// (sums in float32, each output rounded once).
enum class OnednnConvType { kFloat32, kBFloat16 };

// y [N, O, OH, OW] = conv(x [N, C, H, W], w [O, C, kH, kW]) + b [O] (b may be null), every
// tensor dense in `type`, on this thread's OpenMP threads. N >= 1. Throws Error if oneDNN
// fails (std::bad_alloc when out of memory).
void onednn_conv_forward(const ConvGeometry& g, OnednnConvType type, const void* x, const void* w,
                         const void* b, void* y);

// From gy [N, O, OH, OW]: dx [N, C, H, W], dw [O, C, kH, kW] and db [O], each overwritten and
// skipped when null. N >= 1. Throws as onednn_conv_forward does.
void onednn_conv_backward(const ConvGeometry& g, OnednnConvType type, const void* x, const void* w,
                          const void* gy, void* dx, void* dw, void* db);

}  // namespace tessera::detail
