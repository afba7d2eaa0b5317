#pragma once
// What the layers with parameters (Linear, BatchNorm, LayerNorm) check of an input's dtype.
#include "tessera/nn/module.h"

namespace tessera::nn {

// Refuses an input whose dtype the layer's parameters (of dtype `params`) cannot take, unless
// autocast runs the layer in one dtype: DtypeError naming the layer, its path and the fix.
void check_input_dtype(const Module& m, const Tensor& x, Dtype params);

}  // namespace tessera::nn
