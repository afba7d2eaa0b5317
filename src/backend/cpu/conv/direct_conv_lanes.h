#pragma once
// The images-in-lanes layout of the direct CPU convolution (Note [Direct convolution] in
// direct_conv.cpp), which direct_conv_forward and direct_conv_backward choose for small
// planes. Same contracts as those two.
#include "backend/conv_geometry.h"

namespace tessera::detail::TESSERA_CPU_ISA {  // kernels only: cpu_backend.h

template <typename T>
void lanes_conv_forward(const ConvGeometry& g, const T* x, const T* w, const T* b, T* y);

template <typename T>
void lanes_conv_backward(const ConvGeometry& g, const T* x, const T* w, const T* gy, T* dx, T* dw,
                         T* db);

}  // namespace tessera::detail::TESSERA_CPU_ISA
