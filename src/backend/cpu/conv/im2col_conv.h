#pragma once
// CPU convolution by im2col + GEMM, one image at a time, for every convolution the direct
// path (direct_conv.h) does not take. See Note [CPU convolution] in im2col_conv.cpp. Both
// functions split the batch across the OpenMP pool themselves.
#include "backend/conv_geometry.h"
#include "core/half.h"

namespace tessera::detail::TESSERA_CPU_ISA {  // kernels only: cpu_backend.h

// y [N, O, OH, OW] = conv(x [N, C, H, W], w [O, C, kH, kW]) + b [O] (b may be null).
template <typename T>
void im2col_conv_forward(const ConvGeometry& g, const T* x, const T* w, const T* b, T* y);

// Note [bfloat16 convolution] (im2col_conv.cpp); needs cpu_bf16_matmul_on().
void im2col_conv_forward_bf16(const ConvGeometry& g, const BFloat16* x, const BFloat16* w,
                              const BFloat16* b, BFloat16* y);

// From gy [N, O, OH, OW]: dx [N, C, H, W], dw [O, C, kH, kW] and db [O], each overwritten,
// and skipped when null.
template <typename T>
void im2col_conv_backward(const ConvGeometry& g, const T* x, const T* w, const T* gy, T* dx, T* dw,
                          T* db);

// The same in bfloat16 (Note [bfloat16 convolution backward]); needs cpu_bf16_matmul_on().
void im2col_conv_backward_bf16(const ConvGeometry& g, const BFloat16* x, const BFloat16* w,
                               const BFloat16* gy, BFloat16* dx, BFloat16* dw, BFloat16* db);

}  // namespace tessera::detail::TESSERA_CPU_ISA
