#pragma once
// The dtype rule of the layers' ops (linear, conv2d): no promotion between the input and
// the parameters, whose dtype the layer chose (autocast casts them before this check).
#include "tessera/tensor.h"

namespace tessera::detail {

// DtypeError naming `op` unless x, weight and bias (when defined) share one dtype.
void check_layer_dtypes(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias);

}  // namespace tessera::detail
